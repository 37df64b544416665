"""Endpoints to choose between, made the way the registry makes them."""

from __future__ import annotations

from llmgw.router.endpoint import Endpoint, EngineLoad

NOW = 10_000.0


def replica(n: int, *, weight: float = 1.0, in_flight: int = 0, ttft: float | None = None,
            running: float = 0, waiting: float = 0, kv: float | None = None, read_at: float | None = NOW,
            breaker=None, read: bool = False) -> Endpoint:
    """A replica; its engine's figures read at `read_at` when it gives one of them, or `read` (kv unsaid)."""
    url = f"http://10.0.0.{n}:8000/v1"
    e = Endpoint(id=url, model="llama", url=url, upstream_model="llama", weight=weight, in_flight=in_flight)
    if ttft is not None:
        e.observe_ttft(ttft, now=NOW)
    if read_at is not None and (read or running or waiting or kv is not None):
        e.load = EngineLoad(running=running, waiting=waiting, kv_usage=kv, read_at=read_at)
    if breaker is not None:
        e.breaker = breaker
    return e


def replicas(count: int, **kw) -> list[Endpoint]:
    return [replica(i + 1, **kw) for i in range(count)]
