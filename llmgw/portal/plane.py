"""What the portal needs of the process serving the client port: the client app's plane, plus more.

A control plane without workers (llmgw.control.plane.ControlPlane) and
each worker process (llmgw.control.workers.worker.Worker) fit this as they
are (cli/server.py, which hands them to `mount`, holds them to it); the
portal imports neither. The MCP servers' service for /admin/mcp is the MCP
gateway's (llmgw.mcp.admin.PortalServers), which the portal, beside it on
one floor, cannot import: McpServers says what the page calls of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from llmgw.router import ClientPlane

if TYPE_CHECKING:
    from llmgw.account import Actor, Principal
    from llmgw.config import ServerConfig
    from llmgw.control import ClusterSettingsWatcher
    from llmgw.store import Store


class DroppingKeys(Protocol):
    """The key cache, which the portal also tells of a revoked key or changed limits."""

    def remembers(self, secret: str) -> bool: ...

    async def lookup(self, secret: str) -> Principal | None: ...

    def invalidate(self, key_id: str) -> None: ...  # a key revoked or changed

    def clear(self) -> None: ...  # limits changed: every key's effective limits may differ


class PortalPlane(ClientPlane, Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def cfg(self) -> ServerConfig: ...  # this machine's server.yaml: data_dir, for the master key

    @property
    def keys(self) -> DroppingKeys: ...

    @property
    def settings(self) -> ClusterSettingsWatcher: ...  # read, and changed by /admin/settings and /admin/sign-in


class McpServers(Protocol):
    """The company's MCP servers as /admin/mcp lists, adds, changes, removes and tests them.

    Each server is its admin API view (what `ctl mcp list --json` shows), read by the page's template;
    a change is audited as `actor` and raises an ExpectedError that says why not.
    """

    async def list(self) -> Sequence[Mapping[str, object]]: ...  # with "state": the gateway's breaker, tools

    # `data` as /api/v1/mcp/servers takes it: the form's fields, checked by the service.
    async def add(self, actor: Actor, data: dict[str, Any]) -> Mapping[str, object]: ...

    async def update(self, actor: Actor, name: str, data: dict[str, Any]) -> Mapping[str, object]: ...

    async def remove(self, actor: Actor, name: str) -> Mapping[str, object]: ...

    async def test(self, name: str) -> Mapping[str, object]: ...  # "tools": what it offers, asked now
