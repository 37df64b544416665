"""Placeholders for redacted values, and putting the values back into the answer.

A request's Redactor writes `[EMAIL_1]` for the first e-mail address it
redacts, `[EMAIL_2]` for the second, and the same placeholder again
whenever the same value comes back, in any message of the request — so the
model can still tell "the same person" from "another person". The map from
placeholder to value lives in this object and nowhere else: it is never
logged, stored, cached or put in a span, and it goes when the request does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from llmgw.guard.detectors import PLACEHOLDER_NAMES, Match

PLACEHOLDER = re.compile(r"\[([A-Z][A-Z_]*)_(\d+)\]")


def _same(kind: str, value: str) -> str:
    """The form two mentions of one value share: "4111 1111…" and "4111-1111…" are one card."""
    if kind in ("cards", "phone", "iban"):
        return "".join(c for c in value if c.isalnum()).upper()
    if kind == "email":
        return value.lower()
    return value


class Redactor:
    """One request's placeholders. Not shared between requests, by design."""

    __slots__ = ("_by_value", "_values", "_counts")

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, kind: str, value: str) -> str:
        key = (kind, _same(kind, value))
        found = self._by_value.get(key)
        if found is None:
            name = PLACEHOLDER_NAMES.get(kind) or re.sub(r"[^A-Z_]", "_", kind.upper())
            n = self._counts.get(name, 0) + 1
            self._counts[name] = n
            found = f"[{name}_{n}]"
            self._by_value[key] = found
            self._values[found] = value
        return found

    def apply(self, text: str, matches: Iterable[Match]) -> str:
        """`text` with each of `matches` (not overlapping) replaced by its placeholder."""
        parts, at = [], 0
        for m in sorted(matches, key=lambda m: m.start):
            if m.start < at:
                continue
            parts.append(text[at:m.start])
            parts.append(self.placeholder(m.kind, m.value))
            at = m.end
        parts.append(text[at:])
        return "".join(parts)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        # Never the values, should one end up in a log line or a traceback.
        return f"<Redactor {len(self._values)} placeholders>"

    def restore(self, text: str) -> str:
        """`text` with this request's placeholders put back; any other "[X_n]" is left as it is."""
        if not self._values or "[" not in text:
            return text
        return PLACEHOLDER.sub(lambda m: self._values.get(m.group(), m.group()), text)

    def restore_json_fragment(self, text: str) -> str:
        """Restore into text that lands inside a JSON string (tool-call arguments): each value JSON-escaped.

        The model wrote `{"to": "[EMAIL_1]"}`; a value with a quote or a
        backslash put back as it is would break the arguments' JSON.
        """
        if not self._values or "[" not in text:
            return text
        return PLACEHOLDER.sub(
            lambda m: json.dumps(self._values[m.group()], ensure_ascii=False)[1:-1] if m.group() in self._values
            else m.group(), text)

    def conceal(self, text: str) -> str:
        """`text` with this request's values put back as their placeholders: the inverse of restore.

        An answer is restored before its rules read it; what goes on to a
        judge or an outside service is concealed again, so they read the
        answer as the model wrote it and never a value redaction took out.
        """
        if not self._values:
            return text
        for placeholder, value in self._values.items():
            if value in text:
                text = text.replace(value, placeholder)
        return text

    def prefixes(self) -> frozenset[str]:
        """Every beginning of every placeholder this request has, "[" included."""
        return frozenset(p[:i] for p in self._values for i in range(1, len(p)))


class StreamRestorer:
    """Puts a request's values back into an answer that arrives in pieces.

    A placeholder can arrive across two stream events ("[EMA" then
    "IL_1] ok"); sending the first half would show the client a broken
    placeholder and make the restore miss it. So text from an unclosed "["
    is held back — but only while it can still become one of this request's
    placeholders: "[see above]" is released as soon as "s" arrives.

    One restorer per channel of the answer (content, reasoning, each tool
    call's arguments), as each is a text of its own.
    """

    __slots__ = ("_redactor", "_held", "_prefixes", "_json")

    def __init__(self, redactor: Redactor, json_fragment: bool = False):
        self._redactor = redactor
        self._prefixes = redactor.prefixes()
        self._held = ""
        self._json = json_fragment

    def feed(self, delta: str) -> str:
        """What of the answer so far can be sent now."""
        text, self._held = restore_split(self._held + delta if self._held else delta, self._prefixes)
        return self._restore(text)

    def flush(self) -> str:
        """The rest, at the end of the answer."""
        text, self._held = self._held, ""
        return self._restore(text)

    def _restore(self, text: str) -> str:
        if not text:
            return text
        return self._redactor.restore_json_fragment(text) if self._json else self._redactor.restore(text)


def restore_split(buffer: str, prefixes: frozenset[str]) -> tuple[str, str]:
    """Split an answer's text into what can be sent now and what must wait.

    What waits is the text from the last "[" when it is the beginning of one
    of `prefixes` (a Redactor's placeholders); a held part is therefore never
    longer than the longest placeholder.
    """
    cut = buffer.rfind("[")
    if cut != -1 and buffer[cut:] in prefixes:
        return buffer[:cut], buffer[cut:]
    return buffer, ""
