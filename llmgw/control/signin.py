"""Setting up sign-in from the directory: what is on, trying a block before it is kept, and its secrets.

The admin API (`/api/v1/auth…`, what `llmgw ctl auth` calls) and the admin
page /admin/sign-in both call this, so the two cannot disagree about what a
trial found or what keeping a block wrote. A block is tried first and kept
only when every step passed: a wrong bind DN or an unknown CA written into
the cluster's settings would lock people out on every control plane within
the settings poll, while a failed trial changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from llmgw.account import Actor
from llmgw.auth import SYNC_TARGET, Secrets, Trial, configured_redirect, make_token, token_made
from llmgw.auth.secrets import check_name
from llmgw.config import (
    STORE_SECRET_PREFIX,
    ConfigError,
    Invalid,
    LDAPSettings,
    OIDCSettings,
    ServerConfig,
    from_dict,
    own_secrets,
    to_dict,
)
from llmgw.control.settings import ClusterSettingsWatcher, SettingsError, validated_change
from llmgw.errors import N_
from llmgw.store import AuditEntry, AuditStore, PeopleStore, SecretsStore

KINDS = ("oidc", "ldap")  # what can be tried; SCIM is answered, not dialled, so there is nothing to try


class _Store(SecretsStore, PeopleStore, AuditStore, Protocol):
    """What SignInSetup calls: the sealed secrets (and SCIM's token), directory identities, the audit."""


class SignInSetup:
    """Sign-in's setup for one control plane or worker: reads live settings, keeps through validated_change."""

    def __init__(self, store: _Store, watcher: ClusterSettingsWatcher, cfg: ServerConfig, *,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.watcher = watcher
        self.cfg = cfg
        self.secrets = Secrets(store, cfg.data_dir, own_secrets(cfg))
        self._clock = clock

    # what is on

    async def status(self) -> dict[str, Any]:
        """How people get in now: each way on or off with what it says, the kept secrets, the last sync."""
        auth = self.watcher.current.auth
        oidc, ldap, scim = auth.oidc, auth.ldap, auth.scim
        made = await token_made(self.store)
        sync = await self.store.list_audit(limit=1, target=SYNC_TARGET)
        return {
            "passwords": {"on": not oidc.no_passwords, "break_glass": auth.break_glass},
            "oidc": {"on": oidc.enabled, "issuer": oidc.issuer, "client_id": oidc.client_id,
                     "label": oidc.label, "secret": oidc.client_secret_file, "groups_claim": oidc.groups_claim,
                     "create_accounts": oidc.create_accounts, "no_passwords": oidc.no_passwords,
                     "redirect_url": self.redirect_url(oidc), "verified_email_claim": oidc.verified_email_claim,
                     "roles": oidc.roles, "memberships": oidc.memberships},
            "ldap": {"on": ldap.enabled, "urls": ldap.urls, "base_dn": ldap.base_dn, "bind_dn": ldap.bind_dn,
                     "secret": ldap.bind_password_file, "label": ldap.label, "domain": ldap.domain,
                     "create_accounts": ldap.create_accounts, "sync_interval": str(ldap.sync_interval),
                     "trust_email": ldap.trust_email,
                     "roles": ldap.roles, "memberships": ldap.memberships,
                     "last_sync": {"at": sync[0].at, **(sync[0].after or {})} if sync else None},
            "scim": {"on": scim.enabled, "token": ("file" if scim.token_file else
                                                    "made" if made is not None else "none"),
                     "token_made_at": made, "trust_email": scim.trust_email, "roles": scim.roles,
                     "memberships": scim.memberships},
            "secrets": await self.secret_names(),
            "accounts": await self._tied_counts(),
        }

    async def secret_names(self) -> list[str]:
        """The store:auth/NAME references kept in the store (names only; a value is never read back)."""
        prefix = "auth/"
        return [STORE_SECRET_PREFIX + name[len(prefix):] for name in await self.store.list_sealed_secrets(prefix)]

    async def _tied_counts(self) -> dict[str, int]:
        return {source: len(await self.store.list_identities(source)) for source in ("oidc", "ldap", "scim")}

    # trying and keeping

    def block(self, kind: str, given: dict[str, Any] | None) -> OIDCSettings | LDAPSettings:
        """The block to try: `given` (auth.KIND's keys, as in the settings) checked as the settings would
        check it, or the block in force. SettingsError names the key at fault."""
        _check_kind(kind)
        auth = self.watcher.current.auth
        if given is None:
            return auth.oidc if kind == "oidc" else auth.ldap
        try:
            built: OIDCSettings | LDAPSettings = (
                from_dict(OIDCSettings, given, path="auth.oidc") if kind == "oidc"
                else from_dict(LDAPSettings, given, path="auth.ldap"))
        except (ConfigError, Invalid) as e:
            problem = e.problem if isinstance(e, ConfigError) else e
            if problem is not None:
                raise SettingsError(problem.template, params=problem.params or None, key=e.key) from None
            raise SettingsError(N_("{problem}"), params={"problem": str(e)}) from None
        if not built.enabled:
            raise SettingsError(N_("auth.{kind} says nowhere to sign in: set {what}"),
                                params={"kind": kind, "what": "issuer" if kind == "oidc" else "urls"})
        return built

    def redirect_url(self, settings: OIDCSettings, given: str = "") -> str | None:
        """Where the provider would send people back: as asked, as set, else portal.address's; None with
        none of them (single sign-on then does not start: llmgw.auth.oidc.configured_redirect)."""
        return given or configured_redirect(settings, self.watcher.current.portal.address)

    async def trial(self, kind: str, given: dict[str, Any] | None = None, *, login: str = "",
                    redirect_url: str = "") -> Trial:
        """Try a block (or the one in force): every step with what it found or why it failed."""
        settings = self.block(kind, given)
        if not settings.enabled:
            raise SettingsError(N_("auth.{kind} is not set up; give the block to try, or keep one first"),
                                404, "not_found", params={"kind": kind})
        if isinstance(settings, OIDCSettings):
            from llmgw.auth import oidc

            return await oidc.trial(settings, self.secrets,
                                    redirect_url=self.redirect_url(settings, redirect_url))
        from llmgw.auth import ldap

        return await ldap.trial(settings, self.secrets, login=login)

    async def keep(self, kind: str, given: dict[str, Any], actor: Actor, *, login: str = "",
                   redirect_url: str = "",
                   expected_version: int | None = None) -> tuple[Trial, int | None]:
        """Try `given`, and write it as auth.KIND only when every step passed; (trial, version) or (trial, None)."""
        settings = self.block(kind, given)
        trial = await self.trial(kind, to_dict(settings), login=login, redirect_url=redirect_url)
        if not trial.ok:
            return trial, None
        version, doc = await self.watcher.document()
        if expected_version is not None and expected_version != version:
            # Said here, not left to validated_change: its refusal would come after a trial that passed.
            raise SettingsError(
                N_("the cluster's settings changed since you read them (version {expected_version}, now {version}); "
                   'read them again'),
                409, "conflict", params={"expected_version": expected_version, "version": version})
        whole = dict(doc)
        whole["auth"] = {**(whole.get("auth") or {}), kind: to_dict(settings)}
        version, _ = await validated_change(self.watcher, self.cfg, actor, whole=whole, expected_version=version)
        return trial, version

    async def turn_off(self, kind: str, actor: Actor) -> int:
        """auth.KIND back to its defaults (off); the accounts it made stay, and sign in with nothing until
        an administrator gives them a password or turns it on again."""
        if kind not in (*KINDS, "scim"):
            _check_kind(kind)
        version, _ = await validated_change(self.watcher, self.cfg, actor, unset=[f"auth.{kind}"])
        return version

    # secrets

    async def put_secret(self, name: str, value: str, actor: Actor) -> str:
        """Seal a secret into the store; the answer is the reference to write in the settings."""
        ref = await self.secrets.put(name, value)
        await self._audit(actor, "auth.secret.set", name, None, {"ref": ref})
        return ref

    async def delete_secret(self, name: str, actor: Actor) -> bool:
        check_name(name)
        if name in self._refs_in_use():
            raise SettingsError(N_("store:auth/{name} is named in the settings ({where}); change that first"),
                                409, "in_use", params={"name": name, "where": self._refs_in_use()[name]})
        gone = await self.secrets.delete(name)
        if gone:
            await self._audit(actor, "auth.secret.remove", name, {"ref": STORE_SECRET_PREFIX + name}, None)
        return gone

    def _refs_in_use(self) -> dict[str, str]:
        auth = self.watcher.current.auth
        refs = {"auth.oidc.client_secret_file": auth.oidc.client_secret_file,
                "auth.ldap.bind_password_file": auth.ldap.bind_password_file,
                "auth.scim.token_file": auth.scim.token_file}
        return {ref[len(STORE_SECRET_PREFIX):]: key for key, ref in refs.items() if ref.startswith(STORE_SECRET_PREFIX)}

    async def make_scim_token(self, actor: Actor) -> str:
        """A new SCIM bearer token, shown once: the store keeps its digest, and the one before stops working."""
        token = await make_token(self.store)
        await self._audit(actor, "auth.scim_token", "scim", None, {"made": True})
        return token

    async def _audit(self, actor: Actor, action: str, name: str, before: Any, after: Any) -> None:
        await self.store.add_audit(AuditEntry(at=self._clock(), actor=actor.name, via=actor.via, action=action,
                                              target=f"auth:{name}", before=before, after=after))


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise SettingsError(N_('"{kind}" is not a sign-in to try; the ones there are: {kinds}'), 404, "not_found",
                            params={"kind": kind, "kinds": ", ".join(KINDS)})
