"""What goes wrong moving a model's files, each as a sentence a person can act on: shared by a node fetching its
weights (llmgw.agent.weights) and the mirror fetching and serving them (llmgw.mirror).

A message names the source (never a token or a signed URL's query), what happened, and what to do about it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


class WeightsError(Exception):
    """A model's files could not be made ready here."""


class ChecksumMismatch(WeightsError):
    """A file whose sha256 is not the one the catalog (or Hugging Face) gives for it."""

    def __init__(self, message: str, *, source: str, got: str, want: str):
        super().__init__(message)
        self.source = source
        self.got = got
        self.want = want


class FetchFailed(WeightsError):
    """The source answered with an error, or could not be reached."""

    def __init__(self, message: str, *, status: int = 0, wait: float = 0.0):
        super().__init__(message)
        self.status = status
        self.wait = wait
        """Seconds a model mirror asked to be given while it brings the file in itself (0: not such an answer)."""


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
