"""What goes wrong fetching weights, each as a sentence a person can act on.

The message ends up in a shard's ShardStatus.message and from there in
`llmgw ctl replicas`: it names the source (never a token or a signed URL's
query), what happened, and what to do about it.
"""

from __future__ import annotations

from llmgw.engines import PICKLE_EXTENSIONS
from llmgw.hub import ChecksumMismatch, FetchFailed, WeightsError, redact

__all__ = ["ChecksumMismatch", "FetchFailed", "NotLocal", "PickleRefused", "UnsafeName", "WeightsError", "redact",
           "refuse_pickle"]


class PickleRefused(WeightsError):
    """A source in a pickle format, refused before anything was fetched."""


class NotLocal(WeightsError):
    """A path source that is not on this node."""


class UnsafeName(WeightsError):
    """A name that would put a file outside the cache directory, or outside its set."""


def refuse_pickle(source: str, name: str = "") -> PickleRefused:
    what = f"{name} in the set at {redact(source)}" if name else redact(source)
    return PickleRefused(
        f"{what} is in a pickle format ({', '.join(PICKLE_EXTENSIONS)}), which runs code when it is loaded; "
        "nothing was fetched. Use the model's safetensors or GGUF, or set allow_pickle: true on the model "
        "if its files were checked and it has no other form."
    )
