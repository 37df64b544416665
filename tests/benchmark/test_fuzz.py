"""A bounded fuzz of a real gateway: the same hostile requests as `python3 build.py bench fuzz`, fewer of them.

One fixed seed, so a regression shows on every run, then a few rounds on
seeds of the moment, printed, so a find in them can be sent again with
`LLMGW_FUZZ_SEED=N python3 build.py bench fuzz`.
"""

from __future__ import annotations

import random

import pytest

from llmgw.benchmark import fuzz
from llmgw.benchmark.fuzzcases import CLIENT_ROUTES

FIXED_SEED = 20261203


@pytest.fixture(scope="module")
def rig():
    started = fuzz.Rig.start()
    yield started
    # A traceback logged after its round was read is still one.
    left = started.tracebacks()
    started.stop()
    assert not any(left.values()), left


def failures(result: fuzz.Result) -> str:
    lines: list[str] = []
    result.report(lines.append)
    return "\n".join(lines)


def test_the_fuzz_runs_with_the_guardrails_refusing_a_planted_secret(rig):
    assert fuzz.guardrails_on(rig)


def test_1500_hostile_requests_on_a_fixed_seed_get_no_5xx_and_leave_no_traceback(rig):
    result = fuzz.fuzz(rig, FIXED_SEED, 1500)
    print(result.figures())
    assert result.ok, failures(result)
    assert result.sent == 1500
    # It reached the handlers, not only the doors: answers, refusals of the body, of the key, of the admin token.
    assert {200, 400, 401, 413, 415} <= set(result.statuses)
    for path, _ in CLIENT_ROUTES:
        assert result.routes[(path, 200)] and result.routes[(path, 400)], path
    assert result.routes[("/v1/models", 200)]
    assert any(what.startswith("admin 200") for what in result.codes)


@pytest.mark.parametrize("round_", range(3))
def test_a_round_on_a_seed_of_the_moment_gets_no_5xx_and_leaves_no_traceback(rig, round_):
    seed = random.randrange(1 << 30)
    print(f"fuzz seed {seed}")
    result = fuzz.fuzz(rig, seed, 300)
    assert result.ok, f"seed {seed} (LLMGW_FUZZ_SEED={seed} python3 build.py bench fuzz):\n{failures(result)}"
