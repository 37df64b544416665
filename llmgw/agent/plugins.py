"""The plugins an agent uses, loaded once at start: engines it can run and kinds of weight source.

The loading and its warnings are llmgw/plugins.py. Engines go into the
engine registry, before the agent says which engines the node has; weight
sources are handed to Weights after llmgw's own, so a plugin's claims only
sources none of those do (s3:…, a site's own scheme).
"""

from __future__ import annotations

import logging

from llmgw import engines, plugins
from llmgw.agent.weights import Fetcher
from llmgw.config import AgentConfig

log = logging.getLogger("llmgw.plugins")

AGENT_GROUPS = (plugins.ENGINES, plugins.WEIGHT_SOURCES)


def load_agent_plugins(cfg: AgentConfig) -> tuple[plugins.Plugins, list[Fetcher]]:
    """(what was found, every weight source in the order they are offered a source: llmgw's, then plugins')."""
    found = plugins.load(AGENT_GROUPS, args={plugins.WEIGHT_SOURCES: (cfg.weights,)})
    for engine in found.objects(plugins.ENGINES, builtin=False):
        engines.register(engine)
    return found, found.objects(plugins.WEIGHT_SOURCES)
