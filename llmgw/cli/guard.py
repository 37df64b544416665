"""`llmgw ctl guard judge check`: whether the guardrails' judge keeps up, measured from this machine.

The policies and the judge model's endpoints come from the cluster's
settings (the admin API's GET /api/v1/config); the judgments go straight
to the judge's replicas from here, as the gateway on this machine sends
them. Replicas the cluster places itself are not in the settings: give
them with --endpoint.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from llmgw.cli.output import emit_json
from llmgw.control import AdminError

if TYPE_CHECKING:
    from llmgw.config import JudgePolicy


def register(ctl_commands, common) -> None:
    guard = ctl_commands.add_parser("guard", help="guardrails: the judge model")
    sub = guard.add_subparsers(dest="guard_command", metavar="WHAT")
    judge = sub.add_parser("judge", help="the guardrails' judge model")
    jsub = judge.add_subparsers(dest="judge_command", metavar="ACTION")
    check = jsub.add_parser(
        "check", parents=[common], help="time the judge against the policies' latency_budget",
        description="Times three judgments of a 280-token prompt one after another, then a burst at once, "
                    "against the judge model's replicas, and sets them against the policy's latency_budget. "
                    "Ends ok, tight (a judgment past half the budget, or a busy moment past it) or slow (a "
                    "judgment alone past the budget), with what to do. Exit 0 for ok and tight, 1 for slow "
                    "or when the judge does not answer.")
    check.add_argument("--policy", metavar="NAME", help="the policy whose judge and budget to check (default: "
                                                        "every policy with a judge)")
    check.add_argument("--endpoint", action="append", metavar="URL",
                       help="a judge replica's base URL (http://10.0.0.9:8000/v1), instead of the settings' "
                            "endpoints; give it once for each")
    check.add_argument("--burst", type=int, default=8, help="judgments asked at once (default 8)")
    check.set_defaults(run=run_judge_check)


def judges_in(settings: dict, policy: str | None) -> list[tuple[str, JudgePolicy]]:
    """(policy names, JudgePolicy) for each judge model to check, with the shortest budget any
    policy naming it gives: that is the wait a request under it has."""
    from llmgw.config import Duration, JudgePolicy

    policies = ((settings.get("guard") or {}).get("policies") or {})
    if policy is not None:
        if policy not in policies:
            known = ", ".join(sorted(policies)) or "none"
            raise AdminError(f"there is no guard policy {policy}; the policies are: {known}")
        if not (policies[policy] or {}).get("judge"):
            raise AdminError(f"the guard policy {policy} has no judge")
        chosen = {policy: policies[policy]}
    else:
        chosen = {name: p for name, p in policies.items() if (p or {}).get("judge")}
        if not chosen:
            raise AdminError("no guard policy has a judge (guard.policies.NAME.judge in the settings)")
    by_model: dict[str, tuple[list[str], JudgePolicy]] = {}
    for name, p in chosen.items():
        j = p["judge"]
        try:
            budget = Duration.parse(j.get("latency_budget", "5s"))
        except ValueError as e:
            raise AdminError(f"guard.policies.{name}.judge.latency_budget: {e}") from None
        made = JudgePolicy(model=j["model"], on=j.get("on", "input"), latency_budget=budget)
        names, have = by_model.get(made.model, ([], None))
        names.append(name)
        if have is None or float(made.latency_budget) < float(have.latency_budget):
            have = made
        by_model[made.model] = (names, have)
    return [(", ".join(names), judge) for names, judge in by_model.values()]


def endpoints_of(settings: dict, model: str, given: list[str] | None):
    from llmgw.router import Endpoint

    if given:
        urls = given
    else:
        entry = next((m for m in settings.get("models") or [] if m.get("name") == model), None)
        if entry is None:
            raise AdminError(f"the judge model {model} is not among the settings' models; if the cluster places "
                             "its replicas, give them with --endpoint URL")
        if entry.get("source") == "external":
            raise AdminError(f"the judge model {model} is an outside provider's; its speed is the provider's")
        urls = entry.get("endpoints") or []
        if not urls:
            raise AdminError(f"the judge model {model} has no endpoints in the settings; if the cluster places "
                             "its replicas, give them with --endpoint URL")
    return [Endpoint(id=u.rstrip("/"), model=model, url=u.rstrip("/"), upstream_model=model) for u in urls]


def run_judge_check(args) -> int:
    import asyncio

    from llmgw.cli.ctl import client

    if not 1 <= args.burst <= 64:
        print("llmgw: --burst must be between 1 and 64", file=sys.stderr)
        return 2
    api = client(args)
    settings = api.call("GET", "/api/v1/config")["value"]
    chosen = judges_in(settings, args.policy)
    placed = not args.endpoint and any(
        not any(m.get("name") == judge.model for m in settings.get("models") or []) for _, judge in chosen)
    if placed:
        # A judge the cluster places (as setup's is) has no endpoints in the settings: the control plane
        # times it through its own replicas (POST /api/v1/guard/judges/check).
        return _checked_by_the_control_plane(api, args)
    plans = [(names, judge, endpoints_of(settings, judge.model, args.endpoint)) for names, judge in chosen]
    reports = asyncio.run(_check_all(plans, args.burst, quiet=args.json))
    if args.json:
        checks = [{"policies": names, **r.to_dict()} for (names, _, _), r in zip(plans, reports, strict=True)]
        emit_json({"checks": checks})
    return 0 if all(r.state in ("ok", "tight") for r in reports) else 1


def _checked_by_the_control_plane(api, args) -> int:
    from types import SimpleNamespace

    body = {"burst": args.burst, **({"policy": args.policy} if args.policy else {})}
    try:
        checks = api.call("POST", "/api/v1/guard/judges/check", body)["checks"]
    except AdminError as e:
        if e.status != 404 or e.code is not None:
            raise
        # No such route, as opposed to a refusal of this request (which names its own code): a control plane
        # older than this program, as during an upgrade.
        raise AdminError("this control plane does not time the judges it places (its llmgw is older than this "
                         "one); give them with --endpoint URL, the judge replicas' addresses") from None
    if args.json:
        emit_json({"checks": checks})
    else:
        for check in checks:
            print(f"{check['model']}, {check['replicas']} replica(s), a request waits {check['budget_s']:.1f} s for it "
                  f"(policy {check['policies']}), timed by the control plane")
            print_report(SimpleNamespace(alone=check["alone_s"], burst=check["burst"], burst_times=check["burst_s"],
                                         per_second=check["per_second"], failures=check["failures"],
                                         state=check["state"], budget=check["budget_s"], advice=check["advice"]))
    return 0 if all(c["state"] in ("ok", "tight") for c in checks) else 1


async def _check_all(plans, burst: int, quiet: bool):
    import aiohttp

    from llmgw.guard import check_speed

    reports = []
    async with aiohttp.ClientSession() as session:
        for names, judge, endpoints in plans:
            if not quiet:
                print(f"{judge.model}, {len(endpoints)} replica(s), a request waits "
                      f"{float(judge.latency_budget):.1f} s for it (policy {names})", flush=True)
            report = await check_speed(session, endpoints, judge, burst=burst)
            if not quiet:
                print_report(report)
            reports.append(report)
    return reports


def print_report(r) -> None:
    if r.alone:
        print("alone: " + ", ".join(f"{t:.1f}" for t in r.alone) + " s")
    if r.burst_times:
        print(f"{r.burst} at once: slowest {max(r.burst_times):.1f} s; about {r.per_second:.1f} "
              "judgments a second")
    for why in dict.fromkeys(r.failures):
        print(f"no judgment: {why}")
    summary = {
        "ok": "ok: judgments keep within the budget, a busy moment included",
        "tight": "tight: a busy moment passes the budget" if r.alone and max(r.alone) <= r.budget / 2
        else "tight: a judgment alone takes more than half the budget",
        "slow": "slow: a judgment alone takes longer than the budget; under fail: closed such requests are refused",
        "unavailable": "unavailable: the judge gave no judgment at all",
    }[r.state]
    print(summary)
    if r.advice:
        print("what to do: " + "; or ".join(r.advice))
