"""The judge's speed, measured by the control plane itself: what `server init` asks once its judge is up.

    POST /api/v1/guard/judges/check   {policy?, alone?: 1-10, burst?: 0-64}

`llmgw ctl guard judge check` times the judge from the machine it runs on,
through the endpoints it is given. This route times it from the control
plane, through the router's own replicas of the judge model (with the
engines' key), as requests are judged: an install has no other way to
reach replicas the cluster placed. The answer is llmgw.guard's SpeedCheck
per judge model: the times, ok/tight/slow/unavailable, and what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, body

if TYPE_CHECKING:
    from llmgw.config import JudgePolicy
    from llmgw.control.plane import ControlPlane


def register(r: web.UrlDispatcher) -> None:
    r.add_post("/api/v1/guard/judges/check", judges_check)


def judges_of(policies: dict[str, Any], only: str | None) -> list[tuple[str, JudgePolicy]]:
    """(the policies' names, the judge with the shortest budget any of them gives it), a judge model each."""
    if only is not None and only not in policies:
        raise Refused(404, f"there is no guard policy {only}; guard.policies in the settings lists them", "not_found")
    chosen = {name: p for name, p in policies.items() if (only is None or name == only) and p.judge is not None}
    if not chosen:
        said = f"the guard policy {only} has no judge" if only else "no guard policy has a judge"
        raise Refused(409, f"{said} (guard.policies.NAME.judge in the settings)", "no_judge")
    by_model: dict[str, tuple[list[str], JudgePolicy]] = {}
    for name, policy in sorted(chosen.items()):
        judge = policy.judge
        names, have = by_model.get(judge.model, ([], judge))
        names.append(name)
        if float(judge.latency_budget) < float(have.latency_budget):
            have = judge
        by_model[judge.model] = (names, have)
    return [(", ".join(names), judge) for names, judge in by_model.values()]


async def judges_check(request: web.Request) -> web.Response:
    from llmgw.guard import check_speed

    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    alone = _field(data, "alone", int)
    burst = _field(data, "burst", int)
    alone, burst = (3 if alone is None else alone), (8 if burst is None else burst)
    if not 1 <= alone <= 10 or not 0 <= burst <= 64:
        raise Refused(400, "alone is 1 to 10 judgments, burst 0 to 64", "invalid_request")
    if plane.workers is not None:
        raise Refused(409, "this control plane routes through worker processes, each with replicas of its own; time "
                           "the judge with llmgw ctl guard judge check --endpoint URL", "workers")
    router = plane.router
    checks = []
    for names, judge in judges_of(plane.settings.current.guard.policies, _field(data, "policy", str)):
        endpoints = router.judge_endpoints(judge.model)
        report = await check_speed(router.session, endpoints, judge, alone=alone, burst=burst)
        if not endpoints:
            report.failures.append(f"{judge.model} has no ready replica here; llmgw ctl replicas --model "
                                   f"{judge.model} says where it is")
        checks.append({"policies": names, **report.to_dict()})
    return _json({"checks": checks})
