"""What the MCP gateway needs of the process it is mounted in: the seam between it and control.

/mcp is served on the client port by a control plane without workers
(llmgw.control.plane.ControlPlane) or by each worker process
(llmgw.control.workers.worker.Worker); the admin routes and the portal's
/admin/mcp page by the control plane. Each fits these Protocols as it is
(cli/server.py holds them to it). Every member is read-only, as in
llmgw.router.plane, so a process may hold a wider type than is asked here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from llmgw.router import ClientPlane

if TYPE_CHECKING:
    from llmgw.config import ServerConfig
    from llmgw.store import Store


class ServersPlane(Protocol):
    """What registering and asking a server reads: the store its record is in, and where the master key is."""

    @property
    def store(self) -> Store: ...

    @property
    def cfg(self) -> ServerConfig: ...  # data_dir, for the master key; the admin listener, for a worker's way in


class McpPlane(ServersPlane, ClientPlane, Protocol):
    """The process serving /mcp, as the gateway reads it: the process serving the client port (its settings, the
    caller's key with its grants, the router's guardrails), since the media tools make their requests through its
    router as the caller (mcp/media.py)."""
