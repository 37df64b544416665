"""What the portal needs of the process serving the client port: the client app's plane, plus more.

A control plane without workers (llmgw.control.plane.ControlPlane) and
each worker process (llmgw.control.workers.worker.Worker) fit this as they
are; the portal imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from llmgw.router import ClientPlane

if TYPE_CHECKING:
    from llmgw.account import Principal
    from llmgw.config import ServerConfig
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
