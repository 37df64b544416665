"""Ranking a model's endpoints for one request, and taking the one to send to.

The proxy's side of it:

    for endpoint in choose(model_endpoints, profile, key, exclude=tried):
        if not take(endpoint):      # its half-open trial went to someone else meanwhile
            continue
        endpoint.in_flight += 1     # before the next await: admission reads it
        ... send; then endpoint.breaker.success() / .failure(reason) / .abandon()

choose() only looks: it offers a half-open endpoint (its breaker's one trial
not yet handed out) among the rest without taking the trial, because it
ranks many endpoints and only one is sent to. take() is where the trial is
handed out, to the endpoint actually used. Asked again after a failure,
choose(..., exclude=tried) ranks afresh: the queues moved meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from llmgw.router.scheduler.base import LOAD_MAX_AGE, Context, Scorer
from llmgw.router.scheduler.base import profile as find_profile
from llmgw.router.scheduler.base import scorer as find_scorer

if TYPE_CHECKING:
    from llmgw.router.endpoint import Endpoint

log = logging.getLogger(__name__)

# Equal scores (idle replicas, nothing measured yet) are settled in turn, so
# requests that come one at a time still spread instead of all going to the
# first replica listed.
_turns = itertools.count()
_reported: set[str] = set()


def available(endpoint: Endpoint) -> bool:
    """Whether the endpoint's breaker would let a request through now; takes nothing."""
    return endpoint.breaker.available()


def take(endpoint: Endpoint) -> bool:
    """Claim the endpoint for a request about to be sent: in half-open this is the one trial."""
    return endpoint.breaker.allow()


def choose(endpoints: Sequence[Endpoint], profile: str, session_key: str | None = None,
           exclude: Iterable[str] = frozenset(), now: float | None = None,
           *, load_max_age: float = LOAD_MAX_AGE, prompt_blocks: int = 0,
           cached: Mapping[str, int] | None = None) -> list[Endpoint]:
    """The endpoints a request may go to, best first; the rest are for retries before the first byte.

    Endpoints whose breaker is open (or whose half-open trial is out) and
    those whose id is in `exclude` are left out. An unknown profile raises
    UnknownProfile (a ValueError) with a sentence naming the known ones.
    """
    chosen_profile = find_profile(profile)
    now = time.monotonic() if now is None else now
    exclude = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
    candidates = [e for e in endpoints if e.id not in exclude and available(e)]
    if len(candidates) <= 1:
        return candidates
    ctx = Context(candidates=candidates, endpoints=endpoints, profile=chosen_profile.name,
                  session_key=session_key, now=now, load_max_age=load_max_age, prompt_blocks=prompt_blocks,
                  cached=cached or {})
    weighted = [(name, find_scorer(name), w) for name, w in chosen_profile.weights if w]
    n = len(candidates)
    turn = next(_turns) % n
    ranked = []
    for i, endpoint in enumerate(candidates):
        total = 0.0
        for name, scorer, weight in weighted:
            total += weight * _score(name, scorer, endpoint, ctx)
        ranked.append((total, (i - turn) % n, endpoint))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [endpoint for _, _, endpoint in ranked]


def _score(name: str, scorer: Scorer, endpoint: Endpoint, ctx: Context) -> float:
    # A site's scorer that raises must not take routing down with it: it
    # counts as neutral, and is logged once rather than on every request.
    try:
        value = float(scorer.score(endpoint, ctx))
        if math.isfinite(value):
            return value
        raise ValueError(f"it scored {endpoint.id} as {value}")
    except Exception:
        if name not in _reported:
            _reported.add(name)
            log.exception("the routing scorer %s failed; it counts as 0 until fixed", name)
        return 0.0
