"""/scim/v2 on the client port: one handler that checks the setting and the token, then dispatches.

Every path under /scim/v2 is answered here in SCIM's shape, a wrong method
and an unknown path included, so the portal's catch-all page never answers
a provider with HTML. When auth.scim.enabled is off (read at each request,
so turning it on needs no restart) the whole tree is a SCIM 404.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from llmgw.account import AccountError, Accounts
from llmgw.auth.directory import DirectoryAccounts, GroupMap
from llmgw.auth.scim import schemas
from llmgw.auth.scim.errors import ScimError, error_response, scim_json
from llmgw.auth.scim.groups import Groups
from llmgw.auth.scim.provisioning import Provisioning
from llmgw.auth.scim.resources import Query, read_json
from llmgw.auth.scim.tokens import TokenCheck
from llmgw.auth.scim.users import Users
from llmgw.auth.secrets import Secrets
from llmgw.config import SCIMSettings, own_secrets
from llmgw.errors import N_, ExpectedError
from llmgw.store import (
    AuditStore,
    Conflict,
    KeysStore,
    PeopleStore,
    ScimStore,
    SecretsStore,
    StoreError,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from llmgw.config import ClusterSettings, ServerConfig

log = logging.getLogger("llmgw.auth.scim")

ROOT = "/scim/v2"


class _Settings(Protocol):
    @property
    def current(self) -> ClusterSettings: ...


class _Keys(Protocol):
    def clear(self) -> None: ...


class _Store(KeysStore, PeopleStore, ScimStore, SecretsStore, AuditStore, Protocol):
    """What SCIM hands its parts: Accounts (keys, people, the audit), the directory and provisioning
    (people, SCIM's records), and the token's check (the sealed secrets)."""


class ScimPlane(Protocol):
    """What SCIM reads of the process serving the client port (a control plane or a worker)."""

    @property
    def store(self) -> _Store: ...

    @property
    def cfg(self) -> ServerConfig: ...

    @property
    def settings(self) -> _Settings: ...

    @property
    def keys(self) -> _Keys: ...


class Scim:
    def __init__(self, plane: ScimPlane):
        store = plane.store
        self.plane = plane
        accounts = Accounts(store)
        directory = DirectoryAccounts(store, accounts.people, accounts.audit,
                                      break_glass=lambda: plane.settings.current.auth.break_glass)
        provisioning = Provisioning(store, directory, accounts.audit, lambda: _gmap(plane.settings.current.auth.scim),
                                    plane.keys.clear, lambda: plane.settings.current.auth.scim.trust_email)
        self.users = Users(provisioning)
        self.groups = Groups(provisioning)
        self.tokens = TokenCheck(store, Secrets(store, plane.cfg.data_dir, own_secrets(plane.cfg)),
                                 lambda: plane.settings.current.auth.scim)
        # One change at a time in this process: a provider's parallel PATCHes of one group would
        # otherwise each read the members before the other wrote them.
        self._writing = asyncio.Lock()

    def base(self, request: web.Request) -> str:
        configured = str(self.plane.settings.current.portal.address or "").rstrip("/")
        return (configured or f"{request.scheme}://{request.host}") + ROOT

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if not self.plane.settings.current.auth.scim.enabled:
                raise ScimError(404, N_("SCIM is off here; an administrator turns it on with auth.scim.enabled"))
            header = request.headers.get("Authorization", "")
            presented = header[7:].strip() if header[:7].lower() == "bearer " else ""
            if not await self.tokens.accepts(presented):
                response = error_response(ScimError(
                    401, N_("send the SCIM token as Authorization: Bearer; llmgw ctl auth scim-token makes one")))
                response.headers["WWW-Authenticate"] = 'Bearer realm="llmgw SCIM"'
                return response
            return await self._dispatch(request)
        except ScimError as e:
            return error_response(e)
        except AccountError as e:
            return error_response(ScimError(e.status if e.status in (400, 403, 404, 409) else 400, e.template,
                                            scim_type="uniqueness" if e.status == 409 else None,
                                            params=e.params or None))
        except Conflict as e:  # a race the checks before the write did not see: the database said it
            return error_response(ScimError(409, e.template, scim_type="uniqueness", params=e.params or None))
        except StoreUnavailable:
            return error_response(ScimError(503, N_("the store does not answer; try again shortly")))
        except (StoreError, ExpectedError) as e:
            return error_response(ScimError(400, e.template, params=e.params or None))

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path[len(ROOT):].strip("/")
        parts = path.split("/") if path else []
        method = "GET" if request.method == "HEAD" else request.method  # aiohttp sends a HEAD no body
        base = self.base(request)
        if not parts:
            raise ScimError(404, N_("there is nothing at {path}"), params={"path": request.path[:200]})
        kind, rest = parts[0], parts[1:]
        if kind in ("ServiceProviderConfig", "ResourceTypes", "Schemas"):
            _allow(method, ("GET",))
            return self._discovery(kind, rest, base)
        if kind == ".search":
            _allow(method, ("POST",))
            return await self._search_all(Query.of(await _search_body(request)), base)
        if kind not in ("Users", "Groups") or len(rest) > 1:
            raise ScimError(404, N_("there is nothing at {path}"), params={"path": request.path[:200]})
        resources: Any = self.users if kind == "Users" else self.groups
        if not rest:
            _allow(method, ("GET", "POST"))
            if method == "GET":
                return await self._list(resources, Query.of(request.query), base)
            body = await read_json(request)  # read before the lock: a slow upload holds up no one
            async with self._writing:
                created = await resources.create(body, base)
            return scim_json(created, 201, {"Location": created["meta"]["location"]})
        ident = rest[0]
        if ident == ".search":
            _allow(method, ("POST",))
            return await self._list(resources, Query.of(await _search_body(request)), base)
        _allow(method, ("GET", "PUT", "PATCH", "DELETE"))
        if method == "GET":
            query = Query.of(request.query)
            found = await (resources.read(ident, base, query) if kind == "Groups" else resources.read(ident, base))
            return scim_json(query.project(found))
        if method == "DELETE":
            async with self._writing:
                await resources.delete(ident)
            return web.Response(status=204)
        body = await read_json(request)
        async with self._writing:
            changed = await (resources.replace(ident, body, base) if method == "PUT"
                             else resources.patch(ident, body, base))
        return scim_json(changed)

    async def _list(self, resources: Any, query: Query, base: str) -> web.Response:
        total, page = await resources.search(query, base)
        return scim_json(schemas.list_response([query.project(r) for r in page] if query.count else [],
                                               total, query.start))

    async def _search_all(self, query: Query, base: str) -> web.Response:
        """POST /.search: users then groups, one filter over both, paged together."""
        everything = replace(query, start=1, count=sys.maxsize)
        found = [*(await self.users.search(everything, base))[1], *(await self.groups.search(everything, base))[1]]
        page = found[query.start - 1:query.start - 1 + query.count]
        return scim_json(schemas.list_response([query.project(r) for r in page], len(found), query.start))

    def _discovery(self, kind: str, rest: list[str], base: str) -> web.Response:
        if kind == "ServiceProviderConfig":
            if rest:
                raise ScimError(404, N_("there is nothing at {path}"), params={"path": "/".join(rest)[:200]})
            return scim_json(schemas.service_provider_config(base))
        listed = schemas.resource_types(base) if kind == "ResourceTypes" else schemas.schemas(base)
        if not rest:
            return scim_json(schemas.list_response(listed, len(listed), 1))
        one = schemas.resource_type(rest[0], base) if kind == "ResourceTypes" else schemas.schema(rest[0], base)
        if one is None or len(rest) > 1:
            raise ScimError(404, N_("there is no {kind} {id}"), params={"kind": kind, "id": "/".join(rest)[:200]})
        return scim_json(one)


async def _search_body(request: web.Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ScimError(400, N_("a search is a JSON object"), scim_type="invalidSyntax")
    return body


def _gmap(settings: SCIMSettings) -> GroupMap:
    return GroupMap.of(settings)


def _allow(method: str, allowed: tuple[str, ...]) -> None:
    if method not in allowed:
        raise ScimError(405, N_("{method} is not taken here; {allowed} is"),
                        params={"method": method, "allowed": ", ".join(allowed)})


def mount(app: web.Application, plane: ScimPlane) -> None:
    """Add /scim/v2 to the client port's app."""
    scim = Scim(plane)
    app.router.add_route("*", ROOT, scim.handle)
    app.router.add_route("*", ROOT + "/{tail:.*}", scim.handle)
