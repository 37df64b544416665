"""The secrets sign-in needs, read where the settings say: a file, or sealed in the store.

`client_secret_file`, `bind_password_file` and `token_file` take an absolute
path (checked as a provider's key file is: the llmgw user's, 0600, one line,
none of llmgw's own secrets) or `store:auth/NAME`, a value sealed under the
master key in the store. The stored form means nothing has to be copied to
each control plane, and a copy of the store (a backup, a dump) does not carry
the secret. Secrets are never logged, audited or put in an error.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from llmgw.config import STORE_SECRET_PREFIX, KeyFileRefused, OwnSecrets, read_key_file
from llmgw.errors import N_, ExpectedError
from llmgw.store import SecretsStore
from llmgw.trust import FILE_NAME, MasterKey, TrustError, read_master_key

_MAX_SECRET = 4096


class SecretError(ExpectedError):
    """Why a secret could not be read or kept, as a sentence that names where, never what."""


def _purpose(name: str) -> str:
    # Bound into the sealed value: one stored secret cannot be passed off as another.
    return f"auth-secret:{name}"


def check_name(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
        raise SecretError(N_('"{name}" is not a secret\'s name: 1-64 letters, digits, "-", "_" or "."'),
                          params={"name": name})
    return name


class Secrets:
    """Reads and keeps sign-in's secrets for one control plane (or worker) with data_dir's master key."""

    def __init__(self, store: SecretsStore, data_dir: str, own: OwnSecrets, *,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.master_key_path = os.path.join(data_dir, FILE_NAME)
        self.own = own
        self._clock = clock
        self._key: MasterKey | None = None

    async def _master_key(self) -> MasterKey:
        if self._key is None:
            try:
                self._key = await asyncio.to_thread(read_master_key, self.master_key_path)
            except FileNotFoundError:
                raise SecretError(N_("there is no master key at {path} to seal or unseal sign-in's secrets; copy it "
                                     "from the first control plane (chmod 600)"),
                                  params={"path": self.master_key_path}) from None
            except TrustError as e:
                raise SecretError(N_("{reason}"), params={"reason": str(e)}) from None
        return self._key

    async def master_key(self) -> MasterKey:
        """This machine's master key, for a value sealed for a moment rather than kept (OIDC's flow cookie)."""
        return await self._master_key()

    async def read(self, ref: str, what: str) -> str:
        """The secret `ref` names; `what` says whose it is in a refusal ("auth.ldap.bind_password_file")."""
        if ref.startswith(STORE_SECRET_PREFIX):
            name = ref[len(STORE_SECRET_PREFIX):]
            sealed = await self.store.sealed_secret(f"auth/{name}")
            if sealed is None:
                raise SecretError(N_("{what} names {ref}, which is not in the store; keep it with "
                                     "llmgw ctl auth secret set {name}"),
                                  params={"what": what, "ref": ref, "name": name})
            key = await self._master_key()
            try:
                return key.unseal(sealed, _purpose(name)).decode("utf-8")
            except TrustError as e:
                raise SecretError(N_("{what}: {reason}"), params={"what": what, "reason": str(e)}) from None
        try:
            return await asyncio.to_thread(read_key_file, ref, self.own)
        except FileNotFoundError:
            raise SecretError(N_("{what} names {ref}, which is not on this machine"),
                              params={"what": what, "ref": ref}) from None
        except (KeyFileRefused, OSError) as e:
            raise SecretError(N_("{what}: {reason}"), params={"what": what, "reason": str(e)}) from None

    async def put(self, name: str, value: str) -> str:
        """Seal `value` into the store as store:auth/NAME, which is returned for the settings."""
        check_name(name)
        value = value.strip()
        if not value or len(value) > _MAX_SECRET or any(not c.isprintable() for c in value):
            raise SecretError(N_("a secret is one line of 1-{most} printable characters"),
                              params={"most": _MAX_SECRET})
        key = await self._master_key()
        await self.store.put_sealed_secret(f"auth/{name}", key.seal(value.encode("utf-8"), _purpose(name)),
                                           self._clock())
        return STORE_SECRET_PREFIX + name

    async def delete(self, name: str) -> bool:
        return await self.store.delete_sealed_secret(f"auth/{check_name(name)}")
