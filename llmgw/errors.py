"""Which exceptions are already sentences for people, and how to say them.

Bottom floor (docs/internals.md): every package may import it, and it imports
none. An error the program expects (a bad config key, a store that does not
answer, a refused join) subclasses `ExpectedError` where it is defined, so the
CLI and the client-port workers can tell it from a bug without importing the
packages that raise it; listing those classes here made control/workers.py
import the CLI (issue 12).
"""

from __future__ import annotations


class ExpectedError(Exception):
    """An error whose message is already a sentence a person can act on: shown as it is, never as a traceback."""


def explain(error: BaseException) -> str | None:
    """The sentence for an error the program expects, None for a bug."""
    if isinstance(error, ExpectedError):
        return str(error)
    return None
