"""What the guardrails decided: for the usage row, for /metrics, and for the client when refused.

A decision names a rule, an action and a direction — never the text that
set it off. That is what lets it go into usage rows, `ctl request ID` and
metrics, which are kept far longer than a request lives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

Direction = Literal["input", "output"]

# What a rule does to the text, from least to most; "" is "not checked".
RANK = {"": 0, "flag": 1, "redact": 2, "block": 3}
# The actions of an `observe` policy: what `enforce` would have done.
WOULD = {"flag": "flag", "redact": "would_redact", "block": "would_block"}


@dataclass(frozen=True, slots=True)
class Decision:
    rule: str
    """pii:email, secrets:github, cards, injection, deny:NAME, max_chars (and, from the judge and services,
    judge:Violent, service:NAME:REASON)."""

    action: str
    """flag, redact, block; would_redact and would_block under `mode: observe`."""

    direction: Direction

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "action": self.action, "direction": self.direction}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused by a rule: what the client is told. Names the rule, never the text."""

    status: int
    code: str
    message: str
    rule: str


def refusal_for(decision: Decision) -> Refusal:
    if decision.rule == "max_chars":
        message = "the request is longer than the guardrail policy allows (max_chars); send a shorter one"
    else:
        message = (f"the request was refused by the guardrail policy (rule {decision.rule}); "
                   "take out what the rule is about and send it again")
    return Refusal(400, "guardrail_blocked", message, decision.rule)


def detail(decisions: Iterable[Decision]) -> dict[str, list[dict[str, str]]]:
    """The usage row's `detail` part: {"guard": [{"rule", "action", "direction"}, …]}, or {} when none."""
    rows = [d.as_dict() for d in decisions]
    return {"guard": rows} if rows else {}


class Decisions:
    """A request's decisions, each (rule, action, direction) once however often it fired."""

    __slots__ = ("_seen", "items")

    def __init__(self) -> None:
        self._seen: set[tuple[str, str, str]] = set()
        self.items: list[Decision] = []

    def add(self, rule: str, action: str, direction: Direction) -> Decision:
        decision = Decision(rule, action, direction)
        key = (rule, action, direction)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(decision)
        return decision

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class GuardStats:
    """Decisions counted by (rule, action), for the router's /metrics (llmgw_guard_decisions_total{rule,action}).

    Rules are bounded by configuration (built-ins, the policies' deny names,
    services' reasons), so they are safe as labels.
    """

    def __init__(self) -> None:
        self.decisions: Counter[tuple[str, str]] = Counter()

    def record(self, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            self.decisions[(d.rule, d.action)] += 1
