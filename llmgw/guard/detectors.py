"""The Detector seam: what finds secrets, card numbers, personal data and injection phrases in a text.

A detector is anything with a `kind` and a `find(text)` that returns the
spans it found. The built-in ones (llmgw/guard/default_detectors.py) are
registered here exactly as a site's own would be, so the seam is used on
every request and a site that needs, say, another country's id numbers
registers a detector of kind `national_id` and replaces ours:

    from llmgw.guard import detectors

    class MyIds:
        kind = "national_id"
        def find(self, text): ...

    detectors.register(MyIds())

Detectors are pure: no I/O, nothing kept between calls, safe to share
between requests and threads. They run on the hot path, so each one does a
cheap check first (no digit, no "@", no known key prefix) and only then its
regular expressions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llmgw.config import Pattern


@dataclass(frozen=True, slots=True)
class Match:
    """One span a detector found.

    `rule` is what decisions and metrics call it (`pii:email`,
    `secrets:github`, `deny:tickets`); `value` is the text found, kept only
    for as long as the request is handled and never written anywhere.
    """

    kind: str
    rule: str
    start: int
    end: int
    value: str


@runtime_checkable
class Detector(Protocol):
    kind: str
    """What the detector finds; a policy's rules name it (secrets, cards, email, phone, iban, national_id,
    person, injection)."""

    def find(self, text: str) -> list[Match]:
        """Every span of `text` this detector recognises, in any order."""
        ...

    # Optional: `pending(text) -> int`, where a value this detector would find may still be in progress
    # at `text`'s end (the index it would begin at; len(text) when none may be). A streamed answer is
    # released up to the earliest such point of a policy's rules as it comes; a policy with a detector
    # that has no `pending` releases its answers a sentence at a time (llmgw.guard.gate).


# Placeholder names per kind: `[EMAIL_1]`. A kind a site adds gets its own
# name upper-cased.
PLACEHOLDER_NAMES = {
    "secrets": "SECRET",
    "cards": "CARD",
    "email": "EMAIL",
    "phone": "PHONE",
    "iban": "IBAN",
    "national_id": "NATIONAL_ID",
    "person": "PERSON",
    "deny": "REDACTED",
}

_registry: dict[str, Detector] = {}


def register(detector: Detector) -> None:
    """Make `detector` the one policies use for its kind, replacing any registered before."""
    if not isinstance(detector, Detector) or not isinstance(getattr(detector, "kind", None), str):
        raise TypeError("a detector needs a `kind` (text) and a `find(text)` method")
    _registry[detector.kind] = detector


def unregister(kind: str) -> None:
    _registry.pop(kind, None)


def get(kind: str) -> Detector | None:
    return _registry.get(kind)


def kinds() -> list[str]:
    return sorted(_registry)


class DenyDetector:
    """A policy's own `deny` patterns, matched case-insensitively.

    Built per effective policy (the patterns are the policy's, not the
    site's), so it is not in the registry.
    """

    kind = "deny"

    def __init__(self, patterns: Iterable[Pattern]):
        self.patterns = [(p.name, re.compile(p.regex, re.IGNORECASE)) for p in patterns]

    def find(self, text: str) -> list[Match]:
        found = []
        for name, regex in self.patterns:
            for m in regex.finditer(text):
                if m.end() > m.start():
                    found.append(Match("deny", f"deny:{name}", m.start(), m.end(), m.group()))
        return found
