"""The messages between the main process and its workers, as dataclasses.

Each travels as one line of JSON over the pair's socketpair,
`{"type": NAME, "body": {...}}`, read and written by llmgw.protocol.codec
as the agent's messages are: a field of the wrong type is refused naming
it, rather than a worker acting on a count it misread. Both ends are the
same program, started together, so there is no version skew to allow for;
the codec's leniency for unknown fields is simply unused here.

Counts travel as the accounting classes make them (RateLimiter.snapshot(),
Budgets.snapshot(), Lender.lend()): lists whose shape those classes own,
so they are `list[Any]` here and checked where they are merged.

Main process → worker: Hello (first, once), Serve, LeaseNow, RoutesNow,
Shared, Lent, Orphans, KeysChanged, Trip (one worker's, passed on), PartChanged.
Worker → main process: Ready, Serving, Failed, Counts, Borrow, Trip, KeysChanged (its portal's, fanned out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw.protocol import CachedBlocks
from llmgw.protocol.codec import seal, unseal
from llmgw.store import Lease

# --- main process → worker ---------------------------------------------------------------------


@dataclass
class LeaseNow:
    """The main process's lease as it stands: on every change and every LEASE_EVERY."""

    leading: bool
    answers: bool = True
    """Whether /v1 is answered here or passed on to the leader (control/exchange.py)."""
    lease: Lease | None = None


@dataclass
class RoutesNow:
    """The route board's content (control/routes.py to_doc) and the engines' key, which never leaves the machine."""

    doc: dict[str, Any]
    key: str | None = None


@dataclass
class Hello:
    """The first message to a worker: who it is, its sockets, its configuration, and where things stand."""

    index: int
    workers: int
    listen_fds: list[int]
    config: dict[str, Any]  # ServerConfig as llmgw.config.loader.to_dict writes it
    lease: LeaseNow
    routes: RoutesNow
    rate: list[Any] = field(default_factory=list)  # the main limiter's whole minute (RateLimiter.counts())


@dataclass
class Serve:
    """Accept connections on your socket now."""


@dataclass
class Shared:
    """The other workers' (and other control planes') counts since the last Shared, to merge."""

    rate: list[Any] = field(default_factory=list)
    spend: list[Any] = field(default_factory=list)


@dataclass
class Lent:
    """The answer to a Borrow: [[scope, scope_id, lent, wait], …] (accounting/lending.py)."""

    levels: list[Any]


@dataclass
class Orphans:
    """The sockets whose own worker does not serve: accept on them too until it does."""

    sockets: list[int]


@dataclass
class KeysChanged:
    """A key revoked (its id), or every key's limits changed (clear): drop them from the key cache.

    Both ways: the main process tells every worker; a worker whose portal made the change tells the
    main process, which tells every worker."""

    invalidate: str = ""
    clear: bool = False


@dataclass
class PartChanged:
    """What the client port's extension serves changed through the main process's admin API (the MCP
    servers: part "mcp"): each worker's own copy is read again now rather than at its next poll."""

    part: str


# --- worker → main process ---------------------------------------------------------------------


@dataclass
class Ready:
    """Set up (store, settings, router, app), not yet accepting."""

    pid: int


@dataclass
class Serving:
    """Accepting on its own socket."""

    pid: int


@dataclass
class Failed:
    """Could not start, as one sentence for the main process to say once."""

    message: str


@dataclass
class Counts:
    """What a worker counted since its last report; its metrics and demand once a second."""

    rate: list[Any] = field(default_factory=list)  # RateLimiter.snapshot()
    spend: list[Any] = field(default_factory=list)  # Budgets.snapshot()
    returned: list[Any] = field(default_factory=list)  # loans given back (Borrower.idle())
    metrics: list[Any] | None = None  # [[name, type, help, [[sample, labels, value], …]], …]
    asked: dict[str, float] | None = None  # its requests' demand, for placement
    last_used: dict[str, float] | None = None


@dataclass
class Borrow:
    """A loan of these levels' minute: [[scope, scope_id, rpm], …] (accounting/lending.py)."""

    levels: list[Any]


# --- both ways ---------------------------------------------------------------------------------


@dataclass
class Trip:
    """A breaker opened on one worker: the main process passes it to the others, so all pass that replica over."""

    endpoint: str
    reason: str = ""


Message = (Hello | Serve | LeaseNow | RoutesNow | Shared | Lent | Orphans | KeysChanged | PartChanged
           | Ready | Serving | Failed | Counts | Borrow | Trip | CachedBlocks)

MESSAGES: dict[str, type] = {
    "hello": Hello, "serve": Serve, "lease": LeaseNow, "routes": RoutesNow, "shared": Shared, "lent": Lent,
    "orphans": Orphans, "keys": KeysChanged, "ready": Ready, "serving": Serving, "failed": Failed,
    "counts": Counts, "borrow": Borrow, "trip": Trip, "part": PartChanged,
    # An agent's message, passed on as it came: each worker's router keeps its own index (router/prefixindex.py).
    "blocks": CachedBlocks,
}
TYPE_OF: dict[type, str] = {cls: name for name, cls in MESSAGES.items()}


def encode(message: Message) -> bytes:
    """One message as its line on the channel, newline included."""
    return seal(message, TYPE_OF, "a message between the main process and a worker") + b"\n"


def decode(line: bytes) -> Message:
    """A line read from the channel as its message; ProtocolError naming what is wrong."""
    message: Message = unseal(line, MESSAGES)
    return message
