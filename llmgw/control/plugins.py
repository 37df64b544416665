"""The plugins a control plane uses, loaded once at start and put where the router and the catalog look.

Detectors for the guard, scorers for routing profiles, engines for the
catalog's checks of a model's profile. Weight sources are the agent's
(llmgw/agent/agent.py). The loading and its warnings are llmgw/plugins.py;
the returned Plugins is kept by the control plane for `ctl status`.
"""

from __future__ import annotations

import logging

from llmgw import plugins
from llmgw.agent import engines
from llmgw.guard import detectors
from llmgw.router.scheduler import register_scorer

log = logging.getLogger("llmgw.plugins")

SERVER_GROUPS = (plugins.DETECTORS, plugins.SCORERS, plugins.ENGINES)


def load_server_plugins(*, quiet: bool = False) -> plugins.Plugins:
    """Load the server's plugins and register each into its seam; the built-ins registered themselves on import."""
    found = plugins.load(SERVER_GROUPS, quiet=quiet)
    for detector in found.objects(plugins.DETECTORS, builtin=False):
        detectors.register(detector)
    for scorer in found.objects(plugins.SCORERS, builtin=False):
        register_scorer(scorer)
    for engine in found.objects(plugins.ENGINES, builtin=False):
        engines.register(engine)
    return found
