"""The plugins a control plane uses, loaded once at start and put where the router and the catalog look.

Detectors for the guard, scorers (and the profiles a scorer plugin brings)
for routing, engines for the catalog's checks of a model's profile. Weight
sources are the agent's (llmgw/agent/plugins.py). The loading and its
warnings are llmgw/plugins.py; the returned Plugins is kept by the control
plane for `ctl status`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from llmgw import engines, plugins
from llmgw.guard import detectors
from llmgw.router import register_profile, register_scorer

log = logging.getLogger("llmgw.plugins")

SERVER_GROUPS = (plugins.DETECTORS, plugins.SCORERS, plugins.ENGINES)


def load_server_plugins(*, quiet: bool = False) -> plugins.Plugins:
    """Load the server's plugins and register each into its seam; the built-ins registered themselves on import."""
    found = plugins.load(SERVER_GROUPS, quiet=quiet)
    warn = log.debug if quiet else log.warning
    for detector in found.objects(plugins.DETECTORS, builtin=False):
        _register(detectors.register, detector, f"the detector {detector.kind}", warn)
    for scorer in found.objects(plugins.SCORERS, builtin=False):
        if _register(register_scorer, scorer, f"the scorer {scorer.name}", warn):
            _register_profiles(scorer, warn)
    for engine in found.objects(plugins.ENGINES, builtin=False):
        _register(engines.register, engine, f"the engine {engine.name}", warn)
    return found


def _register_profiles(scorer: Any, warn: Callable[..., None]) -> None:
    """A scorer plugin's `profiles`, {name: ({scorer: weight}, description)}: a scorer no profile names
    would never be asked, and a module cannot register a profile of its scorer at import, before the
    scorer is registered here."""
    profiles = getattr(scorer, "profiles", None) or {}
    if not isinstance(profiles, Mapping):
        warn("the profiles of the scorer %s were not added: expected {name: ({scorer: weight}, description)}, "
             "got %r", scorer.name, profiles)
        return
    for name, value in profiles.items():
        # Unpacked inside _register, so that a malformed entry is warned of like any other refusal.
        _register(lambda entry: register_profile(entry[0], *entry[1]), (name, value),
                  f"the profile {name} of the scorer {scorer.name}", warn)


def _register(register: Callable[[Any], Any], item: Any, what: str, warn: Callable[..., None]) -> bool:
    try:
        register(item)
    except Exception as e:  # noqa: BLE001 - a plugin's bad value is said, and the gateway goes on
        warn("%s was not added: %s", what, " ".join(str(e).split()))
        return False
    return True
