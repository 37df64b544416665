"""One direction's rules, ready to read a text with: detectors looked up, actions combined.

Each rule has two actions (a `Slot`): the one enforced, from the strictest
`enforce` policy that sets it, and a stricter one only watched, from an
`observe` policy. So a policy tried out in `observe` beside the enforced
baseline records what it would have done ("would_block") and changes
nothing, rather than lending its `block` to the baseline's `enforce`.
"""

from __future__ import annotations

import re
import re._parser as sre_parse  # type: ignore[import-not-found]  # re has no public way to ask a width
from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.config import Pattern
from llmgw.guard import detectors
from llmgw.guard.decisions import RANK, WOULD, Decision, Decisions, Direction
from llmgw.guard.detectors import DenyDetector, Match
from llmgw.guard.redact import Redactor

# The order rules are read in, which is also the order that decides which
# rule a refusal names when several would block.
ORDER = ("secrets", "cards", "email", "phone", "iban", "national_id", "person", "injection")
# Findings of these are never dropped for lying inside a longer finding: a
# site's own pattern and an injection phrase say something about the whole
# text, whatever else is in it.
_NEVER_SHADOWED = frozenset(("deny", "injection"))
_ANCHORED = re.compile(r"\^|\$|\\A|\\Z|\\z")
# The rules that read an identifier (a tool call's id, a Responses item's
# id, a tool result's call_id), besides a site's deny patterns. An id is a
# random part and a counter made by an engine or a gateway; its digits can
# pass for a card's, a phone number's or an id number's by chance, and it
# cannot be masked (the call would lose its result), so those rules would
# refuse an agent's next turn for its own ids (issue 25, item 21). A secret
# is a secret wherever it is put, so the secrets rule still reads ids.
IDENTIFIER_KINDS = frozenset(("secrets",))


@dataclass(frozen=True, slots=True)
class Slot:
    act: str = ""
    """What is done: "", flag, redact or block."""

    watch: str = ""
    """A stricter action only recorded (an observe policy's), or ""."""

    def __bool__(self) -> bool:
        return bool(self.act or self.watch)


def combine(enforced: Sequence[str], observed: Sequence[str]) -> Slot:
    act = max(enforced, key=RANK.__getitem__, default="")
    watch = max(observed, key=RANK.__getitem__, default="")
    return Slot(act, watch if RANK[watch] > RANK[act] else "")


# A deny pattern that may match more than this many characters is read a
# sentence at a time in streamed answers, as no window of held text is sure
# to hold the whole of what it finds.
LONGEST_WINDOW = 256


def _widest(patterns: Sequence[Pattern]) -> int | None:
    """The most characters any of `patterns` can match, plus one for a look at what follows (\\b);
    None when one of them has no bound short enough to hold back (`.*`, `+`)."""
    widest = 0
    for p in patterns:
        try:
            _, most = sre_parse.parse(p.regex, re.IGNORECASE).getwidth()
        except (re.error, OverflowError, RecursionError):
            return None
        if most > LONGEST_WINDOW:
            return None
        widest = max(widest, most + 1)
    return widest


class CompiledRules:
    """The checks of one direction of an effective policy."""

    def __init__(self, slots: dict[str, Slot], deny: Sequence[tuple[Pattern, bool]] = (),
                 max_chars: tuple[int, int] = (0, 0)):
        self.slots = {kind: slot for kind, slot in slots.items() if slot}
        self.checks: list[tuple[detectors.Detector, Slot]] = []
        for kind in ORDER + tuple(sorted(set(self.slots) - set(ORDER))):
            slot = self.slots.get(kind)
            detector = detectors.get(kind)
            if slot and detector is not None:
                self.checks.append((detector, slot))
        self.deny_slots: dict[str, Slot] = {}
        by_rule: dict[str, tuple[list[str], list[str]]] = {}
        for pattern, enforce in deny:
            acts = by_rule.setdefault(f"deny:{pattern.name}", ([], []))
            acts[0 if enforce else 1].append(pattern.action)
        self.deny_slots = {rule: combine(*acts) for rule, acts in by_rule.items()}
        unique = list({(p.name, p.regex): p for p, _ in deny}.values())
        self.deny = DenyDetector(unique) if unique else None
        self.max_chars = max_chars
        # Whether texts may be read joined by newlines as a first look (see
        # `gate`): a site's pattern anchored to a text's start or end would
        # find less in the joined text than in each one, so not with those.
        self.joinable = not any(_ANCHORED.search(p.regex) for p, _ in deny)
        # Whether every rule can say where a value may still be in progress at a text's end
        # (`pending`): then a streamed answer is released behind that point rather than a
        # sentence at a time (llmgw.guard.gate.OutputChecker).
        self._deny_width = _widest(unique) if unique else 0
        self.windowed = self._deny_width is not None and all(
            callable(getattr(detector, "pending", None)) for detector, _ in self.checks)
        self.active = bool(self.checks or self.deny or any(max_chars))
        self.redacts = any(s.act == "redact" for _, s in self.checks) or any(
            s.act == "redact" for s in self.deny_slots.values())

    def pending(self, text: str) -> int:
        """Where a value one of the rules would find may still be in progress at `text`'s end: the
        earliest of each detector's `pending` and, for the deny patterns, their longest match from
        the end. len(text) when none may be. Only when `windowed`."""
        at = len(text)
        for detector, _ in self.checks:
            at = min(at, detector.pending(text))  # type: ignore[attr-defined]
        if self.deny is not None and self._deny_width:
            at = min(at, max(0, len(text) - self._deny_width))
        return at

    def too_long(self, length: int, decisions: Decisions, direction: Direction) -> Decision | None:
        """max_chars: the blocking decision when `length` is over an enforced limit."""
        act, watch = self.max_chars
        if watch and length > watch:
            decisions.add("max_chars", WOULD["block"], direction)
        if act and length > act:
            return decisions.add("max_chars", "block", direction)
        return None

    def scan(self, text: str, redactor: Redactor | None, decisions: Decisions,
             direction: Direction) -> tuple[str, Decision | None]:
        """(the text as it may go on, the decision that blocks it or None).

        Decisions are added to `decisions`; redacted values are replaced
        with `redactor`'s placeholders (none when `redactor` is None, which
        reads only — an observe-only pass).
        """
        found = self.find(text)
        if not found:
            return text, None
        block, redact = self.decide(found, decisions, direction)
        if block is not None or not redact or redactor is None:
            return text, block
        return redactor.apply(text, redact), None

    def find(self, text: str, identifier: bool = False) -> list[tuple[Match, Slot]]:
        """What the rules find in `text`, each with its rule's actions; nothing decided or changed yet.

        With `identifier` (`text` is an id, reads.Text.identifier), only the
        secrets rule and the deny patterns read it: IDENTIFIER_KINDS.
        """
        found: list[tuple[Match, Slot]] = []
        if self.deny is not None:
            for m in self.deny.find(text):
                found.append((m, self.deny_slots[m.rule]))
        for detector, slot in self.checks:
            if identifier and detector.kind not in IDENTIFIER_KINDS:
                continue
            for m in detector.find(text):
                found.append((m, slot))
        return _outermost(found) if found else found

    def decide(self, found: list[tuple[Match, Slot]], decisions: Decisions, direction: Direction,
               names: bool = False) -> tuple[Decision | None, list[Match]]:
        """Record what `found` sets off: (the first enforced block or None, the matches to redact).

        `names` is for a text that is a name the answer must use as it is (a
        tool's name, a schema's property): a placeholder there would rename
        the tool, so a finding to redact blocks the request instead.
        """
        block: Decision | None = None
        redact: list[Match] = []
        for m, slot in found:
            act = "block" if names and slot.act == "redact" else slot.act
            if act:
                decision = decisions.add(m.rule, act, direction)
                if act == "block" and block is None:
                    block = decision
                elif act == "redact":
                    redact.append(m)
            if slot.watch:
                decisions.add(m.rule, WOULD[slot.watch], direction)
        return block, redact


def _outermost(found: list[tuple[Match, Slot]]) -> list[tuple[Match, Slot]]:
    """Drop what lies inside a longer finding: the digits of an IBAN are not also a phone number.

    The order of the rest is the order they were found in (deny, then ORDER),
    which is what decides the rule a refusal names.
    """
    if len(found) == 1:
        return found
    spans = sorted(((m.start, -(m.end - m.start), i) for i, (m, _) in enumerate(found)))
    drop: set[int] = set()
    reach = -1
    for _start, _negative_length, i in spans:
        m = found[i][0]
        if m.kind in _NEVER_SHADOWED:
            continue
        if m.end <= reach:
            drop.add(i)
        else:
            reach = m.end
    return [f for i, f in enumerate(found) if i not in drop] if drop else found
