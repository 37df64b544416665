"""The judge and the outside services on one request: the prompt before it goes on, the answer as it comes back.

The pattern rules (llmgw.guard.gate) are cheap and synchronous; these ask
other machines, so they are awaited. On the prompt, the policy's services
are asked first and the judge only when no service refused it — a service
is the cheaper call, and a prompt already refused needs no judgment. On
the answer, the judge follows the released text as it streams (one
judgment every 600 characters, in the background) and the services read
the whole answer once, at its end.

What each reads is the text as the model reads or wrote it: with a
policy's redaction, placeholders ("[EMAIL_1]"), never the values a restore
puts back — an outside service must not be handed what redaction took out.

A judge or service that gives no reading decides by the policy's `fail`:
`closed` refuses (503 on the prompt; the answer stopped), `open` lets the
text by with the decision `judge:unavailable` (or `service:NAME:unavailable`)
flagged. A policy in `mode: observe` never refuses: its judge's and
services' objections are recorded as `would_block`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import aiohttp

from llmgw.guard.decisions import Decision, Decisions, Refusal
from llmgw.guard.judge import Judge, JudgeUnavailable, StreamJudgment, Verdict, judges
from llmgw.guard.policy import EffectivePolicy
from llmgw.guard.services import Reading, ServiceResults, Services, merge_services

if TYPE_CHECKING:
    from llmgw.events import Events
    from llmgw.guard.replica import JudgeReplica

Direction = Literal["input", "output"]


@dataclass(frozen=True)
class Unavailable:
    """A judge or service gave no reading under `fail: closed`: what the client is told."""

    status: int
    code: str
    message: str
    rule: str


class Reviewers:
    """The long-lived askers, one set per router: the judge (with its five-minute memory) and the services."""

    def __init__(self, session: aiohttp.ClientSession, endpoints: Callable[[str], Sequence[JudgeReplica]], *,
                 events: Events | None = None) -> None:
        self.judge = Judge(session, endpoints, events=events)
        self.services = Services(session, events=events)

    @staticmethod
    def needed(policy: EffectivePolicy | None, direction: Direction) -> bool:
        """Whether the policy has a judge or a service reading `direction`."""
        if policy is None:
            return False
        return (any(judges(j.item, direction) for j in policy.judges)
                or any(s.item.on in (direction, "both") for s in policy.services))


def _action(mode: str, action: str) -> str:
    if mode == "enforce":
        return action
    return "would_block" if action == "block" else action


def _split_by_mode(policy: EffectivePolicy, direction: Direction) -> list[tuple[str, list[Reading]]]:
    """The calls to make: enforced services merged, then observed ones not already asked for an enforcer."""
    enforced = [s.item for s in policy.services if s.mode == "enforce" and s.item.on in (direction, "both")]
    names = {s.name for s in enforced}
    observed = [s.item for s in policy.services
                if s.mode != "enforce" and s.item.on in (direction, "both") and s.item.name not in names]
    out = []
    if enforced:
        out.append(("enforce", merge_services(enforced)))
    if observed:
        out.append(("observe", merge_services(observed)))
    return out


class Tally:
    """What one direction's reviewing decided: decisions to record, and the first that stops the text."""

    __slots__ = ("policy", "decisions", "direction", "stop", "unavailable")

    def __init__(self, policy: EffectivePolicy, decisions: Decisions, direction: Direction) -> None:
        self.policy, self.decisions, self.direction = policy, decisions, direction
        self.stop: Decision | None = None
        self.unavailable: Unavailable | None = None

    def verdict(self, mode: str, action: str, rule: str) -> None:
        decision = self.decisions.add(rule, _action(mode, action), self.direction)
        if mode == "enforce" and action == "block" and self.stop is None and self.unavailable is None:
            self.stop = decision

    def no_reading(self, mode: str, rule: str, why: str) -> None:
        """A judge or service that gave nothing: the policy's `fail` decides (observe only records)."""
        closed = mode == "enforce" and self.policy.fail == "closed"
        decision = self.decisions.add(rule, "block" if closed else "flag", self.direction)
        if closed and self.stop is None and self.unavailable is None:
            self.stop = decision
            self.unavailable = Unavailable(
                503, "guardrail_unavailable",
                f"the guardrail policy could not read this {'request' if self.direction == 'input' else 'answer'}"
                f": {why}; the policy says to refuse what it cannot read (fail: closed), so try again shortly",
                rule)

    def services(self, mode: str, results: ServiceResults) -> None:
        for v in results.verdicts:
            rule = v.rule  # None exactly when the service found the text safe
            if rule is not None:
                self.verdict(mode, v.action, rule)
        for u in results.unavailable:
            self.no_reading(mode, f"service:{u.service}:unavailable", str(u))

    def judged(self, mode: str, action: str, verdict: Verdict) -> None:
        if not verdict.safe:
            self.verdict(mode, action, verdict.rule or "judge:unsafe")


async def review_input(reviewers: Reviewers, policy: EffectivePolicy, text: str,
                       decisions: Decisions) -> Refusal | Unavailable | None:
    """Services, then the judge, on the prompt's latest user turn (as redacted). The refusal to answer with, or None."""
    if not text.strip():
        return None
    reading = Tally(policy, decisions, "input")
    for mode, calls in _split_by_mode(policy, "input"):
        reading.services(mode, await reviewers.services.check_all(calls, text, "input"))
    if reading.stop is None:
        asked = [j for j in policy.judges if judges(j.item, "input")]
        found = await asyncio.gather(*(reviewers.judge.judge(j.item, text) for j in asked), return_exceptions=True)
        for sourced, outcome in zip(asked, found, strict=True):
            if isinstance(outcome, Verdict):
                reading.judged(sourced.mode, sourced.item.action, outcome)
            elif isinstance(outcome, JudgeUnavailable):
                reading.no_reading(sourced.mode, "judge:unavailable", str(outcome))
            else:
                raise outcome
    if reading.unavailable is not None:
        return reading.unavailable
    if reading.stop is not None:
        rule = reading.stop.rule
        return Refusal(400, "guardrail_blocked",
                       f"the request was refused by the guardrail policy (rule {rule}); "
                       "it reads as something the policy does not allow", rule)
    return None


class OutputReview:
    """The judge and services on one answer. feed() the released text; finish() at the end.

    `feed` never waits: judgments run in the background and `poll()` says
    between events whether one objected. `finish()` judges what is left,
    asks the services about the whole answer, and gives the decision that
    stops the answer, or None.
    """

    def __init__(self, reviewers: Reviewers, policy: EffectivePolicy, decisions: Decisions,
                 prompt: str | None) -> None:
        self._reviewers = reviewers
        self._reading = Tally(policy, decisions, "output")
        self._streams: list[tuple[str, str, StreamJudgment]] = [
            (j.mode, j.item.action, reviewers.judge.judge_stream(j.item, prompt=prompt or ""))
            for j in policy.judges if judges(j.item, "output")]
        self._calls = _split_by_mode(policy, "output")
        self._text: list[str] | None = [] if self._calls else None
        self._read = 0  # stream verdicts already taken

    def feed(self, text: str) -> None:
        if not text:
            return
        for _, _, stream in self._streams:
            stream.feed(text)
        if self._text is not None:
            self._text.append(text)

    def poll(self) -> Decision | None:
        """A background judgment that stops the answer, as soon as one has come back."""
        for mode, action, stream in self._streams:
            if stream.unsafe is not None:
                self._reading.judged(mode, action, stream.unsafe)
        return self._reading.stop

    async def finish(self) -> Decision | None:
        reading = self._reading
        for mode, action, stream in self._streams:
            try:
                verdict = await stream.close()
            except JudgeUnavailable as e:
                reading.no_reading(mode, "judge:unavailable", str(e))
                continue
            reading.judged(mode, action, verdict)
        if self._text is not None and reading.stop is None:
            whole = "".join(self._text)
            if whole.strip():
                for mode, calls in self._calls:
                    reading.services(mode, await self._reviewers.services.check_all(calls, whole, "output"))
        return reading.stop

    def cancel(self) -> None:
        for _, _, stream in self._streams:
            stream.cancel()
