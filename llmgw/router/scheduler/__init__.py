"""Choosing which replica (or provider key) of a model a request goes to.

The whole interface the proxy and a site's own routing use:

    choose(endpoints, profile, session_key, exclude, now) -> [Endpoint, ...]   best first
    take(endpoint) -> bool             claim it (hands out a half-open breaker's trial)
    session_key(body, headers) -> str | None
    Scorer, Context                    the seam: score(endpoint, ctx) -> float, lower is better
    register_scorer(scorer), register_profile(name, {scorer: weight}, description)
    profiles(), scorers()              what is registered, for errors, docs and the console

Built-ins (scorers session, latency, queue, kv; profiles chat, batch,
long-context) are registered by default_scorers and default_profiles at
import, the same way a site's module would register its own. See
docs/routing.md.
"""

from llmgw.router.scheduler.base import (
    LOAD_MAX_AGE,
    Context,
    Profile,
    Scorer,
    UnknownProfile,
    profiles,
    register_profile,
    register_scorer,
    scorers,
    unregister_profile,
    unregister_scorer,
)

# isort: split
# The scorers register before the profiles that name them, so these two stay in this order.
from llmgw.router.scheduler import default_scorers as _default_scorers  # noqa: F401  (registers)

# isort: split
from llmgw.router.scheduler import default_profiles as _default_profiles  # noqa: F401  (registers)

# isort: split
from llmgw.router.scheduler.choose import available, choose, take
from llmgw.router.scheduler.session import SESSION_HEADER, session_key

__all__ = [
    "LOAD_MAX_AGE", "SESSION_HEADER", "Context", "Profile", "Scorer", "UnknownProfile", "available",
    "choose", "profiles", "register_profile", "register_scorer", "scorers", "session_key", "take",
    "unregister_profile", "unregister_scorer",
]
