"""How fast the judge is: `llmgw ctl guard judge check`.

It times judgments of ordinary text one after another, then a burst at
once, against a policy's latency_budget, and says what to change when the
judge cannot keep up. It asks the judge model's replicas through the
judge itself (llmgw.guard.judge), with the budget widened: a judgment past
the budget is what this is here to show, not a failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from llmgw.config import JudgePolicy
from llmgw.guard.judge import Judge, JudgeUnavailable, Verdict
from llmgw.guard.replica import JudgeReplica

# About 280 tokens of ordinary work: the size of prompt the original's
# figures were measured with (2.3 s on four cores, 4.2 s on two).
CHECK_TEXT = (
    "Please help me write a short note to the warehouse team about next week's schedule. On Monday the "
    "morning shift starts an hour early because the delivery from the port arrives at six, and we need "
    "four people at the loading dock to check the pallets against the shipping list before they go onto "
    "the shelves. On Tuesday and Wednesday the usual hours apply, but the inventory count for the second "
    "quarter takes place in aisles twelve to twenty, so those aisles are closed to picking until noon. "
    "Thursday is the quarterly safety walk: everyone should wear their high-visibility vests and the "
    "forklift drivers should bring their certificates so that the supervisor can confirm they are up to "
    "date. On Friday we finish at three so that the cleaning company can work on the floors over the "
    "weekend. Remind everyone that the new time-tracking terminals by the entrance replace the paper "
    "sheets from Monday onwards, and that questions about them go to the office, not to the shift lead. "
    "Keep the tone friendly and clear, thank the team for the busy month behind us, and end with the "
    "phone number of the office for anything urgent. The note should fit on one page and use short "
    "paragraphs, one for each day, so that it can be printed and pinned to the board in the break room."
)


@dataclass
class SpeedCheck:
    model: str
    replicas: int
    budget: float
    alone: list[float]  # seconds for each judgment asked on its own
    burst: int  # judgments asked at once
    burst_times: list[float]  # seconds each of those took
    burst_wall: float  # seconds until the last of them was in
    failures: list[str]  # why judgments did not come back
    state: str = ""  # ok, tight, slow, or unavailable
    advice: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        """Judgments a second the judge kept up in the burst."""
        return len(self.burst_times) / self.burst_wall if self.burst_wall > 0 and self.burst_times else 0.0

    def to_dict(self) -> dict:
        return {"model": self.model, "replicas": self.replicas, "budget_s": self.budget,
                "alone_s": [round(t, 3) for t in self.alone], "burst": self.burst,
                "burst_s": [round(t, 3) for t in self.burst_times], "burst_wall_s": round(self.burst_wall, 3),
                "per_second": round(self.per_second, 2), "failures": self.failures, "state": self.state,
                "advice": self.advice}


def p95(values: Sequence[float]) -> float:
    """Nearest rank: of three values, the slowest."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def assess(check: SpeedCheck) -> SpeedCheck:
    """ok, tight (a judgment alone past half the budget, or a busy moment past the budget) or slow
    (one alone past the budget), with what to do."""
    budget = check.budget
    alone, busy = p95(check.alone), p95(check.burst_times)
    if not check.alone:
        check.state = "unavailable"
    elif alone > budget or len(check.alone) < 3:
        check.state = "slow"
    elif alone > budget / 2 or busy > budget or len(check.burst_times) < check.burst:
        check.state = "tight"
    else:
        check.state = "ok"
    if check.state == "ok":
        check.advice = []
        return check
    check.advice = [
        f"more replicas of {check.model} on other machines (now {check.replicas}): a busy or hung one is "
        "covered by another's answer",
        "more cores for each replica, or the judge on a GPU",
        f"a longer latency_budget (now {budget:g} s), where requests may wait that long",
        "fail: open, which serves what the judge could not read in time, recorded as flagged",
    ]
    return check


async def check_speed(session: aiohttp.ClientSession, endpoints: Sequence[JudgeReplica], policy: JudgePolicy, *,
                      alone: int = 3, burst: int = 8, clock: Callable[[], float] = time.monotonic) -> SpeedCheck:
    """Time `alone` judgments one after another, then `burst` at once, and set them against the
    policy's latency_budget. Each text differs, so none is answered from the cache or shared.
    Times are read from `clock`: a test's judge advances its own rather than sleeping."""
    from llmgw.config import Duration

    budget = float(policy.latency_budget)
    # Measured with room to spare: a judgment past the budget is what this is here to show.
    roomy = JudgePolicy(policy.model, policy.categories, policy.on, policy.action, policy.controversial,
                        Duration(max(60.0, 4 * budget)))
    judge = Judge(session, lambda _model: endpoints, clock=clock, cache_size=0)
    check = SpeedCheck(policy.model, len(endpoints), budget, [], burst, [], 0.0, [])
    for n in range(alone):
        try:
            verdict = await judge.judge(roomy, f"{CHECK_TEXT} (check {n + 1})")
        except JudgeUnavailable as e:
            check.failures.append(e.reason)
            break
        check.alone.append(verdict.took)
    if check.alone:
        started = clock()
        found = await asyncio.gather(*(judge.judge(roomy, f"{CHECK_TEXT} (burst {n + 1})") for n in range(burst)),
                                     return_exceptions=True)
        check.burst_wall = clock() - started
        for outcome in found:
            if isinstance(outcome, Verdict):
                check.burst_times.append(outcome.took)
            elif isinstance(outcome, JudgeUnavailable):
                check.failures.append(outcome.reason)
            else:
                raise outcome
    return assess(check)
