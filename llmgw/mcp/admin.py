"""/api/v1/mcp/servers on the admin API: what `llmgw ctl mcp` calls.

Mounted by the control plane's admin app through the same hook that puts
/mcp on the client port (cli/server.py), so every route here is behind the
admin API's token middleware like any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import aiohttp
import orjson
from aiohttp import web

from llmgw.account import Actor
from llmgw.control.adminapi import PLANE, Refused, actor, body
from llmgw.mcp.plane import McpPlane, ServersPlane
from llmgw.mcp.servers import IN_PROCESS, STDIO, ServerError, Servers, ServerView
from llmgw.mcp.stdio import StdioUpstream, stdio_upstream
from llmgw.mcp.upstream import CLUSTER_TOOLS_PATH, HttpUpstream, InProcessUpstream, Upstream, UpstreamError
from llmgw.router import providers_session

if TYPE_CHECKING:
    from llmgw.mcp.gateway import Gateway, ServerState


T = TypeVar("T")


class TestedTool(TypedDict):
    name: str  # as /mcp names it: SERVER.tool
    description: str


class Tested(TypedDict):
    """A server's tools as it was asked for them now (`ctl mcp test`, the portal's Test)."""

    name: str
    tools: list[TestedTool]


class ListedServer(ServerView):
    """A server as the portal's page lists it: with what this process's gateway knows of it."""

    state: ServerState | None  # None: no gateway here, or it has not read the server yet


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _servers_of(plane: ServersPlane) -> Servers:
    return Servers(plane.store, plane.cfg.data_dir, plane.cfg)


def _servers(request: web.Request) -> Servers:
    return _servers_of(request.app[PLANE])


# Tells the gateway of this process, if it serves /mcp, that the servers changed (llmgw.mcp.mount_admin).
CHANGED: web.AppKey[Callable[[], None]] = web.AppKey("llmgw.mcp.servers_changed")


def _told(request: web.Request) -> None:
    request.app[CHANGED]()


async def _refusing(coro: Awaitable[T]) -> T:
    try:
        return await coro
    except ServerError as e:
        raise Refused(e.status, str(e), e.code) from None


async def servers_list(request: web.Request) -> web.Response:
    return _json(await _servers(request).list())


async def servers_add(request: web.Request) -> web.Response:
    data = await body(request)
    servers = _servers(request)
    replace = bool(data.pop("replace", False))
    name = data.get("name")
    if replace and isinstance(name, str) and await request.app[PLANE].store.get_mcp_server(name) is not None:
        data.pop("name")
        view = await _refusing(servers.update(actor(request), name, data))
        _told(request)
        return _json(view)
    view = await _refusing(servers.add(actor(request), data))
    _told(request)
    return _json(view, 201)


async def servers_update(request: web.Request) -> web.Response:
    data = await body(request)
    data.pop("name", None)
    view = await _refusing(_servers(request).update(actor(request), request.match_info["name"], data))
    _told(request)
    return _json(view)


async def servers_remove(request: web.Request) -> web.Response:
    view = await _refusing(_servers(request).remove(actor(request), request.match_info["name"]))
    _told(request)
    return _json(view)


async def servers_test(request: web.Request) -> web.Response:
    """The server's tools, asked now with its credentials: whether llmgw can reach it, and what it offers."""
    plane = request.app[PLANE]
    return _json(await _refusing(test_server(plane, _servers(request), request.match_info["name"])))


async def test_server(plane: McpPlane, servers: Servers, name: str) -> Tested:
    """A server's tools, asked now with its credentials (`ctl mcp test` and the portal's page): a
    ServerError says why not."""
    record = await servers.get(name)
    session = None
    upstream: Upstream
    if record.url == IN_PROCESS:
        upstream = InProcessUpstream(plane)
    elif record.url.startswith(STDIO):
        upstream = stdio_upstream(record, servers)
    else:
        session = aiohttp.ClientSession() if record.allow_private else providers_session()

        async def headers() -> dict[str, str]:
            try:
                return await servers.credentials(record)
            except ServerError as e:
                raise UpstreamError(str(e)) from None

        upstream = HttpUpstream(record.name, record.url, headers, session, record.timeout)
    try:
        tools = await upstream.list_tools()
    except UpstreamError as e:
        raise ServerError(str(e), 502, "server_failed") from None
    finally:
        if session is not None:
            await session.close()
        if isinstance(upstream, StdioUpstream):
            await upstream.close()
    return {"name": record.name, "tools": [
        {"name": f"{record.name}.{t['name']}", "description": t.get("description") or ""} for t in tools]}


class PortalServers:
    """The MCP servers as the portal's /admin/mcp page changes them (cli/server.py hands it to the portal,
    which cannot import this floor's neighbour): the same Servers calls as the routes above, each change
    audited as the person signed in, and this process's gateway told as the routes tell it."""

    def __init__(self, plane: McpPlane, changed: Callable[[], None], gateway: Gateway | None = None):
        self.plane, self.changed, self.gateway = plane, changed, gateway

    def _servers(self) -> Servers:
        return _servers_of(self.plane)

    async def list(self) -> list[ListedServer]:
        """Each server's view, with what this process's gateway knows of it (its breaker, its tools)."""
        gateway = self.gateway
        return [ListedServer(**view, state=gateway.state(view["name"]) if gateway is not None else None)
                for view in await self._servers().list()]

    async def add(self, actor: Actor, data: dict[str, Any]) -> ServerView:
        view = await self._servers().add(actor, data)
        self.changed()
        return view

    async def update(self, actor: Actor, name: str, data: dict[str, Any]) -> ServerView:
        view = await self._servers().update(actor, name, data)
        self.changed()
        return view

    async def remove(self, actor: Actor, name: str) -> ServerView:
        view = await self._servers().remove(actor, name)
        self.changed()
        return view

    async def test(self, name: str) -> Tested:
        return await test_server(self.plane, self._servers(), name)


async def cluster_tool(request: web.Request) -> web.Response:
    """One of the cluster's own tools, for a worker process's /mcp (upstream.InProcessUpstream): the worker
    has granted, guarded and will audit the call; this process has the cluster to answer it from."""
    from llmgw.mcp.cluster import ClusterTools

    arguments = await body(request)
    return _json(await ClusterTools(request.app[PLANE]).call(request.match_info["name"], arguments))


def register(app: web.Application, changed: Callable[[], None]) -> None:
    app[CHANGED] = changed
    r = app.router
    r.add_post(CLUSTER_TOOLS_PATH + "{name}", cluster_tool)
    r.add_get("/api/v1/mcp/servers", servers_list)
    r.add_post("/api/v1/mcp/servers", servers_add)
    r.add_patch("/api/v1/mcp/servers/{name}", servers_update)
    r.add_delete("/api/v1/mcp/servers/{name}", servers_remove)
    r.add_post("/api/v1/mcp/servers/{name}/test", servers_test)
