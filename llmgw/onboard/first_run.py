"""`llmgw server init`: a new store's first settings, first administrator and first API key.

The secrets are printed once, to the terminal that asked, and never
written to a log: the store keeps only their hashes, so a lost password or
key is replaced, not recovered.

The first settings are server.yaml's cluster keys with the `baseline`
guardrail policy added, so a cluster serves nobody's secrets from its first
request rather than from the day someone remembers to write a policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from llmgw.account import Accounts, Actor, new_password
from llmgw.config import ClusterSettings, ServerConfig, cluster_part, from_dict, to_dict
from llmgw.control import DEFAULT_HOLDER, ensure_token, seed_settings, seeded_settings
from llmgw.errors import N_
from llmgw.guard import baseline_policy
from llmgw.notify import NotifyError, Sender, Webhooks, check_url
from llmgw.store import open_store

SYSTEM = Actor("server init", "cli")
BASELINE = "baseline"


def first_settings(cfg: ServerConfig, file_guard: dict[str, Any] | None = None) -> tuple[ClusterSettings, str]:
    """The cluster's settings as init writes them, and what became of the baseline.

    `file_guard` is server.yaml's own `guard:` section as written (None when
    it has none). Policies of its own are kept as they are and the baseline
    is not added ("kept"): a site that wrote its guardrails meant them. A
    `guard.default` it sets (even `[]`) is kept too, with the baseline
    defined beside it to attach where wanted ("defined"). Otherwise the
    baseline applies to every request ("installed").

    No judge: init places no judge model, and a judge that is not served
    would refuse every request under the baseline's `fail: closed`.
    """
    file_guard = file_guard or {}
    doc = to_dict(cluster_part(cfg))
    if cfg.guard.policies:
        return from_dict(ClusterSettings, doc), "kept"
    doc["guard"]["policies"] = {BASELINE: baseline_policy()}
    if "default" in file_guard:
        outcome = "defined"
    else:
        doc["guard"]["default"] = [BASELINE]
        outcome = "installed"
    return from_dict(ClusterSettings, doc), outcome


@dataclass(frozen=True)
class FirstWebhook:
    """Where the cluster's events go from the start (`server init --webhook`, setup's Notifications)."""

    url: str
    format: str = "json"
    allow_private: bool = False


async def init_server(cfg: ServerConfig, *, admin_email: str, project: str,
                      file_guard: dict[str, Any] | None = None, token_holder: str = DEFAULT_HOLDER,
                      webhook: FirstWebhook | None = None) -> dict:
    """Set up a store that has no people yet. Returns what to show once,
    or {"already": True, …} without any secret when it was set up before.

    The store's first settings are written here (see `first_settings`);
    a store that has settings already, because a control plane started on
    it first, keeps them: the store is the truth once it has any. A webhook
    given is checked before anything is written, added with the rest, and
    in the audit log as `webhook.add` by setup.
    """
    if webhook is not None:
        check_url(webhook.url, webhook.allow_private)
        if webhook.format not in ("json", "slack"):
            raise NotifyError(N_('a webhook is sent json or slack, not "{format}"'), params={"format": webhook.format})
    path = cfg.admin_token_path
    held = ensure_token(path, token_holder)
    store = await open_store(cfg.store)
    try:
        accounts = Accounts(store)
        people = await store.count_people()
        if people:
            return {"already": True, "people": people, "admin_token_file": path, "token_holder": held.holder}
        settings, baseline = first_settings(cfg, file_guard)
        if not await seed_settings(store, settings, SYSTEM.name, SYSTEM.via):
            baseline = "store"
            settings = from_dict(ClusterSettings, (await seeded_settings(store)).doc)
        password = new_password()
        person = await accounts.add_person(SYSTEM, email=admin_email, name="Administrator",
                                           role="admin", password=password)
        view, secret = await accounts.create_key(SYSTEM, name="first key", project=project,
                                                 person_email=person.email, create=True)
        # A member of the first project, so the portal offers it to the first admin for keys and chat.
        await accounts.people.join(SYSTEM, person.id, f"project:{project}")
        hook = None
        if webhook is not None:
            sender = Sender(store, lambda: settings.notify, cfg.data_dir, leading=lambda: False)
            hook = await Webhooks(store, sender).add(webhook.url, format=webhook.format,
                                                     allow_private=webhook.allow_private)
            await accounts.audit(SYSTEM, "webhook.add", f"webhook:{hook['id']}", None, hook)
        return {
            "already": False,
            "administrator": {"email": person.email, "password": password},
            "key": {**view, "key": secret},
            "admin_token_file": os.path.abspath(path),
            "token_holder": held.holder,
            "guard": {"baseline": baseline, "default": list(settings.guard.default),
                      "enabled": settings.guard.enabled},
            "webhook": hook,
        }
    finally:
        await store.close()
