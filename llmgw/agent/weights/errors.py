"""What goes wrong fetching weights, each as a sentence a person can act on.

The message ends up in a shard's ShardStatus.message and from there in
`llmgw ctl replicas`: it names the source (never a token or a signed URL's
query), what happened, and what to do about it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from llmgw.engines import PICKLE_EXTENSIONS


class WeightsError(Exception):
    """The weights a shard needs could not be made ready on this node."""


class PickleRefused(WeightsError):
    """A source in a pickle format, refused before anything was fetched."""


class ChecksumMismatch(WeightsError):
    """A file whose sha256 is not the one the catalog gives for it."""

    def __init__(self, message: str, *, source: str, got: str, want: str):
        super().__init__(message)
        self.source = source
        self.got = got
        self.want = want


class FetchFailed(WeightsError):
    """The source answered with an error, or could not be reached."""

    def __init__(self, message: str, *, status: int = 0):
        super().__init__(message)
        self.status = status


class NotLocal(WeightsError):
    """A path source that is not on this node."""


class UnsafeName(WeightsError):
    """A name that would put a file outside the cache directory, or outside its set."""


def redact(source: str) -> str:
    """A source as it may be shown: without a password or a query.

    A signed download URL carries its signature in the query and some
    mirrors take a user and password in the address; neither belongs in a
    log or in `ctl replicas`.
    """
    if "://" not in source:
        return source.split("?", 1)[0].split("#", 1)[0]
    try:
        parts = urlsplit(source)
        netloc = parts.hostname or ""
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
    except ValueError:
        return source.split("?", 1)[0]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def refuse_pickle(source: str, name: str = "") -> PickleRefused:
    what = f"{name} in the set at {redact(source)}" if name else redact(source)
    return PickleRefused(
        f"{what} is in a pickle format ({', '.join(PICKLE_EXTENSIONS)}), which runs code when it is loaded; "
        "nothing was fetched. Use the model's safetensors or GGUF, or set allow_pickle: true on the model "
        "if its files were checked and it has no other form."
    )
