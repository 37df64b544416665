"""Model weights on a node: fetched once into the cache directory, resumed, checked, refused, removed.

The whole interface the agent uses:

    weights = Weights(cfg.cache_dir, hf_endpoint=..., hf_token_file=..., mirror_url=...)
    path = await weights.fetch_profile(profile, on_progress=callback)   # StartShard
    path = await weights.fetch(source, sha256=..., files=..., allow_pickle=..., on_progress=...)
    removed = await weights.remove(sources, in_use=[...])                # RemoveWeights
    await weights.close()

Every failure is a WeightsError whose text says which source, what
happened and what to do; on_progress receives protocol FetchProgress
values (phase "" while bytes arrive, "checking" while they are hashed),
at most every half second. The kinds of source are Fetchers
(sources.py): a path, http(s)://, hf:org/repo/file[@revision], mirror:.
"""

from llmgw.agent.weights.cache import Removed, Weights
from llmgw.agent.weights.errors import (
    ChecksumMismatch,
    FetchFailed,
    NotLocal,
    PickleRefused,
    UnsafeName,
    WeightsError,
)
from llmgw.agent.weights.progress import CHECKING, ProgressCallback
from llmgw.agent.weights.sources import Fetcher, HfFetcher, HttpFetcher, MirrorFetcher, PathFetcher, is_hub_id
from llmgw.engines import PICKLE_EXTENSIONS, is_pickle
from llmgw.hub import Attempts

__all__ = [
    "Attempts",
    "CHECKING",
    "ChecksumMismatch",
    "FetchFailed",
    "Fetcher",
    "HfFetcher",
    "HttpFetcher",
    "MirrorFetcher",
    "NotLocal",
    "PICKLE_EXTENSIONS",
    "PathFetcher",
    "PickleRefused",
    "ProgressCallback",
    "Removed",
    "UnsafeName",
    "Weights",
    "WeightsError",
    "is_hub_id",
    "is_pickle",
]
