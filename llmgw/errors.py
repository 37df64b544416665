"""Which exceptions are already sentences for people, and how to say them.

Bottom floor (docs/internals.md): every package may import it, and it imports
none. An error the program expects (a bad config key, a store that does not
answer, a refused join) subclasses `ExpectedError` where it is defined, so the
CLI and the client-port workers can tell it from a bug without importing the
packages that raise it; listing those classes here made control/workers.py
import the CLI (issue 12).
"""

from __future__ import annotations

from collections.abc import Mapping


def N_(template: str) -> str:
    """Marks `template` as a message to translate (Babel extracts it); returns it unchanged."""
    return template


class ExpectedError(Exception):
    """An error whose message is already a sentence a person can act on: shown as it is, never as a traceback.

    Raised as `ExpectedError(N_("no person {who} here"), params={"who": email})`
    it keeps the untranslated template and its parameters, so the portal can say
    it in the reader's language while str(error) stays the English sentence that
    the CLI and the admin API print. The template is formatted only when params
    are given, so a message holding braces (a JSON excerpt) is never misread.
    """

    template: str
    params: dict[str, object]

    def __init__(self, message: str = "", /, *, params: Mapping[str, object] | None = None):
        self.params = dict(params) if params is not None else {}
        self.template = message
        super().__init__(message.format(**self.params) if params is not None else message)


def explain(error: BaseException) -> str | None:
    """The sentence for an error the program expects, None for a bug."""
    if isinstance(error, ExpectedError):
        return str(error)
    return None
