"""The kinds of weight source llmgw ships, given the way a site's own would be (llmgw/plugins.py)."""

from __future__ import annotations

from llmgw.agent.weights.sources import Fetcher, HfFetcher, HttpFetcher, MirrorFetcher, PathFetcher
from llmgw.config import WeightsSettings


def shipped(settings: WeightsSettings | None = None) -> list[Fetcher]:
    """llmgw's fetchers, configured by agent.yaml's `weights:`; what its `llmgw.weight_sources` entry point names.

    The order is the order a source is offered to them: the first that claims it fetches it.
    """
    settings = settings or WeightsSettings()
    return [PathFetcher(), HttpFetcher(), HfFetcher(settings.hf_endpoint, settings.hf_token_file),
            MirrorFetcher(settings.mirror)]
