"""The built-in scorers, registered exactly as a site's own would be.

Each is lower-is-better and kept to 0..1 over the candidates of one choice,
so a profile's weights compare like with like.
"""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING

from llmgw.router.scheduler.base import Context, Scorer, register_scorer, weight_of
from llmgw.router.scheduler.ring import ring_for

if TYPE_CHECKING:
    from llmgw.router.endpoint import Endpoint

# A session leaves its replica only when that replica's queue is longer than
# the least busy one's by more than both of these. Staying is worth a lot
# (the engine holds the conversation's prefix, and reading a long one again
# costs seconds), so a few requests' difference is not enough; but a replica
# with twice the queue of another is a worse wait than any prefill saved.
SESSION_SLACK = 4.0  # requests, per unit of weight
SESSION_RATIO = 1.5

# What an engine that does not say how full its KV cache is counts as: not
# better than one that says it is half free, not worse either.
KV_UNKNOWN = 0.5


class SessionScorer:
    """0 for the replica the session's place on the ring gives, 1 for the others.

    The ring is over all of the model's endpoints, and candidates that are
    out (a breaker open, one already tried) are walked past: so while a
    session's replica is out its turns keep going to one other replica,
    the ring's next, rather than wherever the other scorers point each time.
    With no session key, or when the session's replica is far busier than
    the least busy (SESSION_SLACK, SESSION_RATIO), everyone scores 0 and the
    profile's other scorers decide.
    """

    name = "session"

    def score(self, endpoint: Endpoint, ctx: Context) -> float:
        pick = ctx.once("session.pick", lambda: self._pick(ctx))
        if pick is None:
            return 0.0
        return 0.0 if endpoint.id == pick else 1.0

    @staticmethod
    def _pick(ctx: Context) -> str | None:
        if ctx.session_key is None or not ctx.candidates:
            return None
        by_id = {e.id: e for e in ctx.candidates}
        ring = ring_for([(e.id, weight_of(e)) for e in ctx.endpoints or ctx.candidates])
        chosen = next((by_id[m] for m in ring.walk(ctx.session_key) if m in by_id), None)
        if chosen is None:  # a candidate the model's list did not hold
            return None
        least = min(ctx.depth(e) for e in ctx.candidates)
        depth = ctx.depth(chosen)
        if depth - least > SESSION_SLACK and depth > least * SESSION_RATIO:
            return None
        return chosen.id


class LatencyScorer:
    """The smoothed time to first token, over the slowest candidate's.

    A replica with none known (new, or not heard from for five minutes)
    scores as the median of the others: good enough to be tried, so it gets
    measured, and not so good that every request goes to it until it is.
    """

    name = "latency"

    def score(self, endpoint: Endpoint, ctx: Context) -> float:
        known, middle, slowest = ctx.once("latency", lambda: self._spread(ctx))
        if not slowest:
            return 0.0
        ttft = known.get(endpoint.id, middle)
        return ttft / slowest

    @staticmethod
    def _spread(ctx: Context) -> tuple[dict[str, float], float, float]:
        known = {}
        for e in ctx.candidates:
            ttft = e.smoothed_ttft(ctx.now)
            if ttft is not None:
                known[e.id] = ttft
        if not known:
            return known, 0.0, 0.0
        return known, median(known.values()), max(known.values())


class QueueScorer:
    """How many requests the replica has on hand (Context.depth), against the busiest candidate.

    Divided by one more than the busiest's depth, so that one request more
    than an idle replica does not weigh as much as a full queue does.
    """

    name = "queue"

    def score(self, endpoint: Endpoint, ctx: Context) -> float:
        deepest = ctx.once("queue.max", lambda: max((ctx.depth(e) for e in ctx.candidates), default=0.0))
        return ctx.depth(endpoint) / (deepest + 1.0)


class KvScorer:
    """How full the engine's KV cache is (0 empty, 1 full): less full is better; an engine that does not say
    counts as half full.

    Compared only when every candidate's figures are recent: against one too
    old to believe, a fresh figure is no comparison. On a loaded machine one
    engine's scrape came late while another's was fresh and low, and five
    requests in a row went to that one, which held the least only on paper
    (the prefix-cache routing test, 2026-12-07): a stale one makes the
    comparison neutral for all, and the profile's other scorers, then turn
    about, decide.
    """

    name = "kv"

    def score(self, endpoint: Endpoint, ctx: Context) -> float:
        if not ctx.once("kv.all_recent", lambda: all(ctx.load(e) is not None for e in ctx.candidates)):
            return KV_UNKNOWN
        load = ctx.load(endpoint)
        if load is None or load.kv_usage is None:
            return KV_UNKNOWN
        return min(1.0, max(0.0, load.kv_usage))


class PrefixScorer:
    """The share of the prompt's blocks the engine does not hold in its prefix cache: 0 holds it all.

    From the engines' own KV events (docs/routing.md). Where the model routes by no cache, or the prompt is
    shorter than a block, everyone scores 0 and the profile's other scorers decide.
    """

    name = "prefix"

    def score(self, endpoint: Endpoint, ctx: Context) -> float:
        if not ctx.prompt_blocks:
            return 0.0
        return 1.0 - min(ctx.cached.get(endpoint.id, 0), ctx.prompt_blocks) / ctx.prompt_blocks


SHIPPED: tuple[Scorer, ...] = (SessionScorer(), LatencyScorer(), QueueScorer(), KvScorer(), PrefixScorer())


def shipped() -> list[Scorer]:
    """llmgw's scorers: what its `llmgw.scorers` entry point names (llmgw/plugins.py)."""
    return list(SHIPPED)


# Registered on import as well, so the built-in profiles (default_profiles) can name them in any process.
for _scorer in SHIPPED:
    register_scorer(_scorer)
