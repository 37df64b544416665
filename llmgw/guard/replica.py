"""What the judge needs of a replica of the judge model, so the guard never imports the router.

The guard sits beside the router, not above it: the router (and the CLI's
`ctl guard judge check`) hands the judge its own endpoints, and
llmgw.router.endpoint.Endpoint has what these Protocols name. Read-only
properties where the judge only reads, so the router's stricter types fit;
mypy will accept an Endpoint here once its `breaker` is typed a Breaker
rather than any object.
"""

from __future__ import annotations

from typing import Protocol


class Availability(Protocol):
    """A replica's breaker, as the judge reads it: whether it would let a request through now."""

    def available(self) -> bool: ...


class JudgeReplica(Protocol):
    """One place the judge model answers: where, under which name, and how busy it is."""

    in_flight: int  # the judge counts its own questions here, as the router counts requests

    @property
    def id(self) -> str: ...

    @property
    def url(self) -> str: ...  # base URL, ending in /v1

    @property
    def upstream_model(self) -> str: ...

    @property
    def api_key(self) -> str | None: ...

    @property
    def breaker(self) -> Availability | None: ...

    def observe_ttft(self, seconds: float) -> None: ...
