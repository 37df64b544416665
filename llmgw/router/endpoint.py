"""One place a model's requests can go: an engine's replica, or one key of an outside provider.

The registry makes these from the cluster's settings (and, with the
cluster, from agents); the scheduler reads their live state to choose; the
proxy updates it as requests start and end. State is per process and in
memory only: it is what this router has seen, which is what it can act on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llmgw.router.breaker import Breaker

# A replica that has not answered for this long has its smoothed time to
# first token forgotten: what it measured then says little about it now.
TTFT_MEMORY = 300.0
# Weight of the newest sample in the smoothed time to first token.
TTFT_ALPHA = 0.2


@dataclass
class EngineLoad:
    """What the engine's own /metrics said, when it was last read."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float | None = None  # 0..1, None when the engine does not say
    read_at: float = 0.0  # monotonic; 0 = never
    # Since the engine started: prompt tokens looked up in its prefix cache and found there, and its
    # time-to-first-token histogram's sum and count; None when it does not say.
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    ttft_sum: float | None = None
    ttft_count: float | None = None
    # The same over the last interval between two reads: the share of prompt tokens the cache held, and the
    # mean seconds to a first token. None until two reads with traffic between them.
    prefix_hit_rate: float | None = None
    engine_ttft: float | None = None


@dataclass(eq=False)
class Endpoint:
    id: str  # "http://10.0.0.7:8000/v1", or "external:gpt-4o#2" for a provider's second key
    model: str  # the catalog model it serves
    url: str  # base URL, ending in /v1
    upstream_model: str  # the name sent to it in "model"
    external: bool = False
    # What answers here, as a trace names it (gen_ai.provider.name): the engine of a replica the cluster
    # placed (vllm, llamacpp, sim…), "external" for an outside provider, "openai_compatible" for an
    # endpoint listed in the settings, whose engine llmgw did not start and cannot name.
    provider: str = "openai_compatible"
    replica: str = ""  # the shard id of a replica the cluster placed; "" for the settings' endpoints
    weight: float = 1.0
    api_key: str | None = None  # a provider key, read from its file by the registry; never logged
    key_file: str | None = None  # where that key is read from; None for an endpoint that needs none
    in_flight: int = 0
    ttft: float | None = None  # smoothed seconds to first byte
    last_answer: float = 0.0  # monotonic time of the last first byte
    load: EngineLoad = field(default_factory=EngineLoad)
    # Every endpoint has one; the registry sets it to the cluster's router.breaker settings and keeps it
    # while the endpoint stays. One made elsewhere (the CLI's judge check) keeps the defaults, and nothing
    # there reports a failure to it, so it stays closed.
    breaker: Breaker = field(default_factory=Breaker)

    def smoothed_ttft(self, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if self.ttft is None or now - self.last_answer > TTFT_MEMORY:
            return None
        return self.ttft

    def observe_ttft(self, seconds: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.ttft is None or now - self.last_answer > TTFT_MEMORY:
            self.ttft = seconds
        else:
            self.ttft += TTFT_ALPHA * (seconds - self.ttft)
        self.last_answer = now

    def __repr__(self) -> str:  # never the key
        return f"Endpoint({self.id!r}, model={self.model!r}, in_flight={self.in_flight})"
