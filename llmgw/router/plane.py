"""What the client app needs of the process that serves it: the seam between the router and control.

Two programs serve the client API: a control plane without workers
(llmgw.control.plane.ControlPlane) and each worker process of one with
them (llmgw.control.workers.worker.Worker). Either hands itself to
`make_client_app`, which keeps it under `appkeys.PLANE` for the handlers.
The router stands below control (docs/internals.md), so it says here what
it reads of them, and both fit these Protocols as they are, without
importing anything from the router to do so. Every member is read-only:
the handlers read the plane's parts and never replace them, and a
read-only member lets a program hold a wider type (the control plane's
key cache, which also drops keys) than the router asks for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from llmgw.account import Principal, UnknownKeyThrottle
    from llmgw.config import ClusterSettings, ServerConfig
    from llmgw.router.service import Router
    from llmgw.store import Lease, Store


class HeldLease(Protocol):
    """The last lease row read: who leads and at which address, for /leader and for passing /v1 on."""

    @property
    def lease(self) -> Lease | None: ...


class Leadership(Protocol):
    """Whether this process leads, as /leader says it, and the lease it last read."""

    @property
    def leading(self) -> bool: ...

    @property
    def state(self) -> HeldLease: ...


class LiveSettings(Protocol):
    """The cluster's settings in force, and their version (the guard's policies are cached per version)."""

    @property
    def current(self) -> ClusterSettings: ...

    @property
    def version(self) -> int: ...


class KeyLookup(Protocol):
    """API keys as the authenticating middleware asks for them (llmgw.account.KeyCache)."""

    def remembers(self, secret: str) -> bool: ...

    async def lookup(self, secret: str) -> Principal | None: ...

    def clear(self) -> None: ...  # forget every key: SCIM suspended or reinstated someone (llmgw.auth.scim)


class ChatLookup(Protocol):
    """The portal's chat credential as the authenticating middleware asks for it (llmgw.account.ChatTokens).

    `lookup` raises AccountError (403) for a project that is not the person's.
    """

    def remembers(self, secret: str) -> bool: ...

    async def lookup(self, secret: str, project_id: str | None) -> Principal | None: ...

    async def for_work(self, person_id: str, project_id: str) -> Principal | None: ...  # a run made with it


class ClientPlane(Protocol):
    """The process serving the client API, as its handlers and middlewares read it."""

    @property
    def name(self) -> str: ...  # this machine's name, in /leader and in a request passed to the leader

    @property
    def lease(self) -> Leadership: ...

    @property
    def settings(self) -> LiveSettings: ...

    @property
    def store(self) -> Store: ...  # SCIM's users and groups (llmgw.auth.scim)

    @property
    def cfg(self) -> ServerConfig: ...  # this machine's server.yaml: data_dir, for the master key SCIM's token may need

    @property
    def keys(self) -> KeyLookup: ...

    @property
    def chat(self) -> ChatLookup: ...

    @property
    def throttle(self) -> UnknownKeyThrottle: ...  # unknown keys, per client address

    @property
    def router(self) -> Router: ...

    @property
    def registry(self) -> CollectorRegistry: ...  # the listener's connection metrics are kept in it

    def answers_itself(self) -> bool:
        """Whether /v1 is answered here rather than passed on to the leader."""
        ...
