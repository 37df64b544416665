"""The MCP gateway: the company's MCP servers behind /mcp, on the client port (docs/mcp.md).

It stands on floor 2 beside the portal (docs/internals.md): it reads the
key cache, the guardrails and the store through the control plane serving
it, and control cannot import it. So cli/server.py hands `mount` to
`serve(..., extend=)` and `run_worker(..., extend=)` (with the portal's),
and the admin API's routes by `mount_admin`.

- plane.py: what it reads of the process serving it (McpPlane), and of the admin side's (ServersPlane).
- servers.py: registering a server, its secrets sealed; what it is sent.
- upstream.py: asking a server (streamable HTTP, or this cluster's own tools in-process).
- gateway.py: the servers and tools in memory, grants, bounds, rate, breaker, audit, metrics.
- guarding.py: the caller's guardrail policies on the arguments and on the answer.
- transport.py: /mcp itself (JSON-RPC 2.0 over the streamable HTTP transport).
- admin.py: /api/v1/mcp/servers.
- cluster.py: ClusterTools, `llmgw.cluster_status`, `list_nodes`, … answered in the control plane's process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.lazyface import lazy_face
from llmgw.mcp.gateway import Gateway
from llmgw.mcp.plane import McpPlane, ServersPlane
from llmgw.mcp.transport import GATEWAY, other, post

if TYPE_CHECKING:
    from llmgw.mcp.admin import PortalServers

__all__ = ["Gateway", "McpPlane", "PortalServers", "ServersPlane", "mount", "mount_admin"]


def mount(app: web.Application, plane: McpPlane) -> Gateway:
    """Add /mcp to a client app; `plane` is the process serving it (a control plane or a worker).
    Returns its gateway, for the admin routes of the same process to tell of a change (mount_admin)."""
    gateway = Gateway(plane, plane.registry)
    app[GATEWAY] = gateway
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", other)  # and HEAD
    app.router.add_delete("/mcp", other)

    async def start(_: web.Application) -> None:
        await gateway.start()

    async def stop(_: web.Application) -> None:
        await gateway.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return gateway


def mount_admin(app: web.Application, plane: ServersPlane, changed: Callable[[], None]) -> None:
    """Add /api/v1/mcp/servers to the admin API's app; `changed()` tells this process's gateway at once
    (with worker processes there is none here, and theirs read the change within their poll). `plane` is
    the control plane whose admin app it is; the routes read it from the app (adminapi.PLANE), as every
    admin route does."""
    from llmgw.mcp.admin import register

    register(app, changed)


# Names that would load more than the rest of the face, imported from their module when first asked for
# (llmgw/lazyface.py): the admin API's service for the portal's page is wanted by the CLI alone.
__getattr__ = lazy_face(__name__, {
    "admin": ("PortalServers",),
})
