"""The Scorer seam, the profiles made of scorers, and the registry of both.

A scorer looks at one candidate endpoint, with the rest of the choice in
`ctx`, and says how bad a pick it would be: lower is better, and built-ins
keep to 0..1 so that a profile's weights mean what they say. A profile is
a weighted sum of scorers; the candidate with the lowest sum is the pick.

Built-ins are registered here by default_scorers and default_profiles, the
same calls a site's own module makes, so the seam is used on every request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from llmgw.router.endpoint import Endpoint, EngineLoad

T = TypeVar("T")

# The engine's own counts are read every 2 s (router.scrape); three missed
# reads and they describe a queue that has long since moved.
LOAD_MAX_AGE = 6.0


@dataclass
class Context:
    """One choice being made: what every scorer is told besides the endpoint it scores."""

    candidates: Sequence[Endpoint]  # those that may be picked (breaker and exclude applied)
    endpoints: Sequence[Endpoint]  # every endpoint of the model, for what must not shift when one is out
    profile: str
    session_key: str | None
    now: float  # monotonic
    load_max_age: float = LOAD_MAX_AGE
    memo: dict[str, object] = field(default_factory=dict)
    # The request's prompt in the engines' blocks, and how many of them each endpoint's engine holds in its
    # prefix cache from the start (router/cacheaware.py); 0 and empty where the model routes by no cache.
    prompt_blocks: int = 0
    cached: Mapping[str, int] = field(default_factory=dict)

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """A figure over all candidates (a median, a maximum), worked out once per choice."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]  # type: ignore[return-value]

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        """The engine's own /metrics, or None when never read or too old to believe."""
        load = endpoint.load
        if not load.read_at or self.now - load.read_at > self.load_max_age:
            return None
        return load

    def depth(self, endpoint: Endpoint) -> float:
        """How many requests the replica has on hand, per unit of its weight.

        The larger of what this router has in flight there and what the
        engine says it is running and holding: this router's requests are
        among the engine's, so adding the two would count them twice, and
        the engine's figure is up to one scrape old, so a burst this router
        just sent shows only in in_flight.
        """
        depth = float(endpoint.in_flight)
        load = self.load(endpoint)
        if load is not None:
            depth = max(depth, load.running + load.waiting)
        return depth / weight_of(endpoint)


def weight_of(endpoint: Endpoint) -> float:
    # A weight of 0 is the settings' way of saying "the default".
    return endpoint.weight if endpoint.weight > 0 else 1.0


@runtime_checkable
class Scorer(Protocol):
    """How bad a pick one endpoint would be for this choice; lower is better, 0..1 for built-ins."""

    name: str

    def score(self, endpoint: Endpoint, ctx: Context) -> float: ...


@dataclass(frozen=True)
class Profile:
    name: str
    weights: tuple[tuple[str, float], ...]  # (scorer name, weight), summed
    description: str = ""


class UnknownProfile(ValueError):
    """A profile name no one registered; the message is the sentence the client is shown (400)."""


_scorers: dict[str, Scorer] = {}
_profiles: dict[str, Profile] = {}


def register_scorer(scorer: Scorer, *, replace: bool = False) -> Scorer:
    """Make a scorer available to profiles under its name.

    A second scorer of the same name is refused unless `replace` says the
    site means to put its own in place of one (a built-in included).
    """
    name = getattr(scorer, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("a scorer needs a name, the word profiles use for it")
    if not callable(getattr(scorer, "score", None)):
        raise ValueError(f"the scorer {name} has no score(endpoint, ctx) method")
    if name in _scorers and not replace:
        raise ValueError(f"there is a scorer called {name} already; pass replace=True to put this one in its place")
    _scorers[name] = scorer
    return scorer


def register_profile(name: str, weights: Mapping[str, float], description: str = "",
                     *, replace: bool = False) -> Profile:
    """Make a routing profile of registered scorers: each candidate's score is the weighted sum."""
    if not name:
        raise ValueError("a profile needs a name, the word models and x-llmgw-profile use for it")
    if not weights:
        raise ValueError(f"the profile {name} names no scorers")
    for scorer, weight in weights.items():
        if scorer not in _scorers:
            raise ValueError(f"the profile {name} names the scorer {scorer}, which is not registered; "
                             f"the scorers are {', '.join(sorted(_scorers))}")
        if weight < 0:
            raise ValueError(f"the profile {name} gives {scorer} a weight of {weight}; weights are 0 or more")
    if name in _profiles and not replace:
        raise ValueError(f"there is a profile called {name} already; pass replace=True to put this one in its place")
    profile = Profile(name, tuple(weights.items()), description)
    _profiles[name] = profile
    return profile


def unregister_profile(name: str) -> None:
    _profiles.pop(name, None)


def unregister_scorer(name: str) -> None:
    """Take a scorer away; refused while a profile still uses it."""
    users = [p.name for p in _profiles.values() if any(s == name for s, _ in p.weights)]
    if users:
        raise ValueError(f"the scorer {name} is used by the profile(s) {', '.join(sorted(users))}")
    _scorers.pop(name, None)


def scorers() -> dict[str, Scorer]:
    return dict(_scorers)


def profiles() -> dict[str, Profile]:
    return dict(_profiles)


def profile(name: str) -> Profile:
    try:
        return _profiles[name]
    except KeyError:
        raise UnknownProfile(
            f"there is no routing profile called {name!r}; the profiles are {', '.join(sorted(_profiles))}"
        ) from None


def scorer(name: str) -> Scorer:
    return _scorers[name]
