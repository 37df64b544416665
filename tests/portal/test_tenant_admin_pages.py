"""The admin pages as an org's administrator sees them (issue 31): Acme's people, tree, keys, usage and audit log,
and nothing of Beta or of the cluster's own pages.

In process: the portal over a real store (both dialects), each person with their own cookie jar.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from llmgw.account import Accounts, Actor
from llmgw.portal import registered
from tests.portal.test_admin_pages import PASSWORD, _post, browser, plane  # noqa: F401 - fixtures used by name

ROOT = Actor("root", "cli")
# Names that are Beta's alone: none may appear on a page Acme's administrator reads.
BETA_WORDS = ("Beta", "bob@beta.example", "ops", "pager", "key-of-beta")


@pytest.fixture
async def people(store):
    """A cluster admin; Tara, who administers the org Acme; Cy of Acme/ml; Bob of Beta/ops; a key in each org."""
    accounts = Accounts(store)
    await store.ensure_project("Acme", "ml", "train")
    await store.ensure_project("Beta", "ops", "pager")
    await accounts.people.add(ROOT, email="root@example.com", name="Root", role="admin", password=PASSWORD)
    for email, place in (("tara@acme.example", "org:Acme"), ("cy@acme.example", "team:Acme/ml"),
                         ("bob@beta.example", "team:Beta/ops")):
        await accounts.people.add(ROOT, email=email, name=email.split("@")[0].title(), password=PASSWORD,
                                  member_of=[place])
    await accounts.people.administer(ROOT, "tara@acme.example", "org:Acme")
    await accounts.create_key(ROOT, name="key-of-acme", project="Acme/ml/train")
    await accounts.create_key(ROOT, name="key-of-beta", project="Beta/ops/pager")
    return accounts.people


def _shows_nothing_of_beta(path: str, page: str) -> None:
    text = re.sub(r"<[^>]+>", " ", page)
    for word in BETA_WORDS:
        assert word not in text, (path, word)


async def test_an_orgs_administrator_sees_the_tenants_pages_in_the_nav_and_only_acme_on_them(store, browser):
    async with browser("tara@acme.example") as tara:
        index = await (await tara.get("/admin")).text()
        for path in ("/admin/people", "/admin/tree", "/admin/keys", "/admin/usage", "/admin/audit"):
            assert f'href="{path}"' in index, path
            answer = await tara.get(path)
            assert answer.status == 200, path
            _shows_nothing_of_beta(path, await answer.text())
        for path in ("/admin/models", "/admin/nodes", "/admin/settings", "/admin/sign-in"):
            assert f'href="{path}"' not in index, path
        people = await (await tara.get("/admin/people")).text()
        keys = await (await tara.get("/admin/keys")).text()
        assert "cy@acme.example" in people and "key-of-acme" in keys


async def test_every_page_not_open_to_tenants_is_refused_to_an_orgs_administrator(store, browser):
    pages = [p for p in registered().pages if p.path.startswith("/admin") and not p.tenants and "GET" in p.methods
             and "{" not in p.path]
    assert len(pages) >= 8
    async with browser("tara@acme.example") as tara:
        for p in pages:
            answer = await tara.get(p.path)
            assert answer.status == 403, p.path
            assert "not for your role" in await answer.text()


async def test_bobs_page_betas_limits_and_betas_key_are_not_there_for_acmes_administrator(store, browser, people):
    bob = await store.person_by_email("bob@beta.example")
    beta = await store.org_by_name("Beta")
    ops = await store.team_by_name(beta.id, "ops")
    [beta_key] = [k for k in await store.list_keys() if k.name == "key-of-beta"]
    async with browser("tara@acme.example") as tara:
        for path in (f"/admin/people/{bob.id}", f"/admin/tree/team/{ops.id}", f"/admin/tree/org/{beta.id}",
                     f"/admin/tree/key/{beta_key.id}"):
            answer = await tara.get(path)
            assert answer.status == 404, path
            _shows_nothing_of_beta(path, await answer.text())
        tried = [
            (f"/admin/people/{bob.id}/suspend", {}, "/admin/people"),
            (f"/admin/people/{bob.id}/reset-password", {}, "/admin/people"),
            (f"/admin/keys/{beta_key.id}/revoke", {}, "/admin/keys"),
            ("/admin/tree", {"kind": "project", "path": "Beta/ops/mine"}, "/admin/tree"),
            (f"/admin/tree/team/{ops.id}", {"rpm": "1"}, "/admin/tree"),
        ]
        for path, data, form_at in tried:
            answer = await _post(tara, path, data, form_at=form_at)
            assert answer.status in (303, 400, 404), (path, answer.status)
    # Nothing of Beta's changed.
    assert not (await store.person_by_email("bob@beta.example")).disabled
    assert (await store.key_by_id(beta_key.id)).revoked_at is None
    assert await store.project_by_path("Beta", "ops", "mine") is None
    assert await store.get_limits("team", ops.id) is None


async def test_an_orgs_administrator_adds_a_member_to_a_team_of_the_org_and_may_not_give_a_role(store, browser):
    async with browser("tara@acme.example") as tara:
        form = await (await tara.get("/admin/people")).text()
        assert re.findall(r'<option value="(\w+)"', form) == ["member"]
        added = await _post(tara, "/admin/people", {"email": "dee@acme.example", "name": "Dee", "role": "member",
                                                    "place": "team:Acme/ml"})
        assert added.status == 200 and "dee@acme.example" in await added.text()  # the password, shown once
        refused = await _post(tara, "/admin/people", {"email": "eve@acme.example", "name": "Eve", "role": "admin",
                                                      "place": "team:Acme/ml"})
        assert refused.status == 400 and "cluster administrator" in await refused.text()
    dee = await store.person_by_email("dee@acme.example")
    assert dee.role == "member" and await store.person_by_email("eve@acme.example") is None


async def test_an_administrator_makes_a_token_on_her_profile_that_is_shown_once_and_revoked_there(store, browser):
    async with browser("cy@acme.example") as cy:
        assert 'id="tokens"' not in await (await cy.get("/profile")).text()  # administers nothing
    async with browser("tara@acme.example") as tara:
        made = await _post(tara, "/profile", {"action": "token"})
        page = await made.text()
        [secret] = re.findall(r"llmgw-pat-[0-9A-Za-z]{43}", page)
        assert made.status == 200 and made.headers["Cache-Control"].startswith("no-store")
        again = await (await tara.get("/profile")).text()
        assert secret not in again and secret[:16] + "…" in again
        assert await store.person_token_by_digest(hashlib.sha256(secret.encode()).digest()) is not None
        tara_id = (await store.person_by_email("tara@acme.example")).id
        [token] = await store.person_tokens(tara_id)
        revoked = await _post(tara, "/profile", {"action": "revoke-token", "token": token.id})
        assert revoked.status == 303
    [token] = await store.person_tokens(tara_id)
    assert token.revoked_at is not None
