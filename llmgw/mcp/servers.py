"""The company's MCP servers as an administrator registers them: checked, their secrets sealed, audited.

A secret header (`--secret-file`) is read once by `llmgw ctl` and sealed
here under the master key, as sign-in's secrets are (llmgw.auth.secrets),
so no file has to be on each control plane and a copy of the store does
not carry it. A header by reference (`--header-ref`) is read at each call:
a file (the llmgw user's, 0600, as a provider's key file), `env:NAME` or
`store:NAME` (`llmgw ctl auth secret set NAME`). Neither ever leaves the
control plane: views, errors and the audit log carry header names only.

A server's URL is refused when it names loopback, link-local or a cloud's
metadata service, the check outside providers get (config/targets.py),
unless the server is added with `allow_private`.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from typing import Any, Protocol, TypedDict
from urllib.parse import urlsplit

import orjson

from llmgw.account import Actor
from llmgw.auth import SecretError, Secrets
from llmgw.config import STORE_SECRET_PREFIX, ServerConfig, host_refusal, own_secrets
from llmgw.errors import ExpectedError
from llmgw.store import AuditEntry, AuditStore, McpServer, McpStore, SecretsStore
from llmgw.trust import TrustError

IN_PROCESS = "llmgw:admin"  # the cluster's own read-only tools, answered in the control plane's process
MEDIA = "llmgw:media"  # pictures and workflows as tools, answered as the caller (mcp/media.py)
STDIO = "stdio:"  # a server run on the control plane: stdio:COMMAND ARGS… (llmgw.mcp.stdio)
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
# Headers the gateway writes itself: a server must not be told a caller it was not.
_OURS = frozenset(h.lower() for h in ("X-Llmgw-Key", "X-Llmgw-User", "X-Llmgw-Project", "Content-Type", "Accept",
                                      "Mcp-Session-Id", "MCP-Protocol-Version", "Content-Length", "Host"))


class ServerError(ExpectedError):
    """A server that cannot be registered or asked, as a sentence; `status` for the admin API and the
    portal's page (which shows the sentence as it is: these are not in the catalogue yet)."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request"):
        super().__init__(message)
        self.status, self.code = status, code


def _purpose(name: str) -> str:
    return f"mcp-headers:{name}"  # bound into the seal: one server's headers cannot pass as another's


class ServerView(TypedDict):
    """A server as the admin API, `ctl mcp` and the audit log show it: never a secret's value."""

    name: str
    url: str
    description: str
    headers: dict[str, str]
    header_refs: dict[str, str]
    secret_headers: list[str]  # names only
    timeout: float
    rate: int | None
    disabled: bool
    allow_private: bool
    run_as: str | None
    version: int
    updated_at: float
    updated_by: str


def view(server: McpServer) -> ServerView:
    """A server as the admin API shows it: never a secret's value."""
    return {"name": server.name, "url": server.url, "description": server.description,
            "headers": dict(server.headers), "header_refs": dict(server.header_refs),
            "secret_headers": list(server.secret_names), "timeout": server.timeout, "rate": server.rate,
            "disabled": server.disabled, "allow_private": server.allow_private, "run_as": server.run_as,
            "version": server.version,
            "updated_at": server.updated_at, "updated_by": server.updated_by}


def check_url(url: str, allow_private: bool) -> str:
    url = url.strip()
    if url in (IN_PROCESS, MEDIA):
        return url
    if url.startswith(STDIO):
        from llmgw.mcp.stdio import command_of

        try:
            command_of(url)
        except ValueError as e:
            raise ServerError(str(e)) from None
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f'"{url}" is not an MCP server\'s address: give http(s)://HOST/PATH, stdio:COMMAND for '
                          f"one run on the control plane, {IN_PROCESS} for this cluster's own tools, or {MEDIA} "
                          "for pictures and workflows")
    why = None if allow_private else host_refusal(parts.hostname)
    if why:
        raise ServerError(f"{why}; an MCP server there is refused unless it is added with --allow-private")
    return url


def _headers(given: Any, what: str) -> dict[str, str]:
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ServerError(f"{what} must be an object of header names and values")
    out: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(name, str) or not _HEADER.match(name):
            raise ServerError(f'"{name}" is not a header name')
        if name.lower() in _OURS:
            raise ServerError(f"{name} is a header llmgw writes itself; it cannot be given")
        if not isinstance(value, str) or not value or len(value) > 8192 or any(c in value for c in "\r\n\0"):
            raise ServerError(f"{what} {name}: a header's value is one line of 1-8192 characters")
        out[name] = value
    return out


class _Store(McpStore, SecretsStore, AuditStore, Protocol):
    """What Servers calls: the MCP servers, the master key's Secrets, and the audit it writes."""


class Servers:
    """Adds, changes, removes and asks the registered servers for one control plane."""

    def __init__(self, store: _Store, data_dir: str, cfg: ServerConfig):
        self.store = store
        self.secrets = Secrets(store, data_dir, own_secrets(cfg))

    async def list(self) -> list[ServerView]:
        return [view(s) for s in await self.store.list_mcp_servers()]

    async def get(self, name: str) -> McpServer:
        server = await self.store.get_mcp_server(name)
        if server is None:
            raise ServerError(f"there is no MCP server named {name}; llmgw ctl mcp list shows them", 404,
                              "not_found")
        return server

    async def add(self, actor: Actor, data: dict[str, Any]) -> ServerView:
        name = data.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ServerError(f'"{name}" is not a server\'s name: 1-32 lower-case letters, digits, "-" or "_" '
                              "(its tools are named NAME.tool)")
        if await self.store.get_mcp_server(name) is not None:
            raise ServerError(f"there is already an MCP server named {name}; change it with llmgw ctl mcp add "
                              f"{name} --replace, or remove it first", 409, "conflict")
        server = await self._build(McpServer(name=name, url=""), data, actor)
        added = await self.store.add_mcp_server(server)
        await self._audit(actor, "mcp.server.add", name, None, view(added))
        return view(added)

    async def update(self, actor: Actor, name: str, data: dict[str, Any]) -> ServerView:
        before = await self.get(name)
        server = await self._build(before, data, actor)
        changed = await self.store.put_mcp_server(server, before.version)
        await self._audit(actor, "mcp.server.update", name, view(before), view(changed))
        return view(changed)

    async def remove(self, actor: Actor, name: str) -> ServerView:
        before = await self.get(name)
        await self.store.delete_mcp_server(name)
        await self._audit(actor, "mcp.server.remove", name, view(before), None)
        return view(before)

    async def _build(self, base: McpServer, data: dict[str, Any], actor: Actor) -> McpServer:
        known = {"name", "url", "description", "headers", "header_refs", "secrets", "timeout", "rate", "disabled",
                 "allow_private", "run_as"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ServerError(f"unknown field {', '.join(unknown)}; a server takes {', '.join(sorted(known))}")
        allow_private = bool(data.get("allow_private", base.allow_private))
        url = data.get("url", base.url)
        if not isinstance(url, str):
            raise ServerError("url must be text")
        url = check_url(url, allow_private)
        description = data.get("description", base.description)
        if not isinstance(description, str) or len(description) > 1000:
            raise ServerError("description is text of at most 1000 characters")
        timeout = data.get("timeout", base.timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
            raise ServerError(f"timeout is a number of seconds above 0 and at most {MAX_TIMEOUT:g}")
        rate = data.get("rate", base.rate)
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate < 1):
            raise ServerError("rate is a whole number of calls a minute, 1 or more (or none)")
        run_as = data.get("run_as", base.run_as if url.startswith(STDIO) else None)
        if run_as is not None and (not isinstance(run_as, str) or not re.fullmatch(r"[A-Za-z0-9._-]{0,32}", run_as)):
            raise ServerError("run_as is a user's name (or empty for the control plane's own user)")
        if run_as is not None and not url.startswith(STDIO):
            raise ServerError("--user is for a server run on the control plane (--stdio)")
        headers = _headers(data["headers"], "header") if "headers" in data else dict(base.headers)
        refs = _headers(data["header_refs"], "header-ref") if "header_refs" in data else dict(base.header_refs)
        for header, ref in refs.items():
            if not (ref.startswith(("env:", "store:")) or os.path.isabs(ref)):
                raise ServerError(f"--header-ref {header}: a reference is an absolute file path, env:NAME or "
                                  "store:NAME")
        sealed, secret_names = base.sealed, list(base.secret_names)
        if "secrets" in data:
            secrets = _headers(data["secrets"], "secret header")
            secret_names = sorted(secrets)
            sealed = await self._seal(base.name, secrets) if secrets else None
        if url.startswith(STDIO) and not all(_ENV.match(h) for h in [*headers, *refs, *secret_names]):
            raise ServerError("a stdio server is given its credentials as environment variables: name each "
                              "with letters, digits and _ (not starting with a digit)")
        every = [h.lower() for h in [*headers, *refs, *secret_names]]
        if len(every) != len(set(every)):
            raise ServerError("a header is given twice (as --header, --header-ref or --secret-file); give each once")
        return replace(base, url=url, description=description, timeout=float(timeout), rate=rate,
                       disabled=bool(data.get("disabled", base.disabled)), allow_private=allow_private, run_as=run_as,
                       headers=headers, header_refs=refs, secret_names=secret_names, sealed=sealed,
                       created_at=base.created_at or time.time(), updated_at=time.time(), updated_by=actor.name)

    async def _seal(self, name: str, secrets: dict[str, str]) -> bytes:
        try:
            key = await self.secrets.master_key()
        except SecretError as e:  # no master key here, said as a sentence
            raise ServerError(str(e), 503, "no_master_key") from None
        return key.seal(orjson.dumps(secrets), _purpose(name))

    async def credentials(self, server: McpServer) -> dict[str, str]:
        """Every header llmgw sends the server: plain, by reference (read now) and sealed."""
        out = dict(server.headers)
        for header, ref in server.header_refs.items():
            out[header] = await self._read_ref(server.name, header, ref)
        if server.sealed is not None:
            try:
                key = await self.secrets.master_key()
                out.update(orjson.loads(key.unseal(server.sealed, _purpose(server.name))))
            except (TrustError, orjson.JSONDecodeError):
                raise ServerError(f"the MCP server {server.name}'s secret headers were not sealed by this "
                                  "cluster's master key; add them again with --secret-file", 503) from None
            except SecretError as e:  # no master key on this machine
                raise ServerError(str(e), 503, "no_master_key") from None
        return out

    async def _read_ref(self, name: str, header: str, ref: str) -> str:
        what = f"the MCP server {name}'s header {header}"
        if ref.startswith("env:"):
            value = os.environ.get(ref[4:], "")
            if not value:
                raise ServerError(f"{what} names {ref}, which is not set in the control plane's environment", 503)
            return value.strip()
        if ref.startswith("store:") and not ref.startswith(STORE_SECRET_PREFIX):
            ref = STORE_SECRET_PREFIX + ref[len("store:"):]
        try:
            return await self.secrets.read(ref, what)
        except SecretError as e:  # says where, never what
            raise ServerError(str(e), 503) from None

    async def _audit(self, actor: Actor, action: str, target: str, before: ServerView | None,
                     after: ServerView | None) -> None:
        await self.store.add_audit(AuditEntry(at=time.time(), actor=actor.name, via=actor.via, action=action,
                                              target=target, before=before, after=after))

