"""A key's rpm held across two active-active control planes on one store (the leader and the standby of
tests/integration/test_ha.py), each hearing the other's counts.

A module of its own, marked `waits`: its one test sends ten requests a second for 55 s and mostly waits, so
the parallel phase's scheduler runs it beside the heavy modules rather than as one of them
(tests/support/schedule.py); in test_ha.py it made that module a heavy one of two minutes.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.test_ha import _active_active, ask, leader, pair  # noqa: F401 - the fixtures

pytestmark = pytest.mark.waits


def test_a_key_with_an_rpm_of_60_is_held_to_it_across_two_active_active_control_planes(pair):
    a, b = pair
    _active_active(a, b)
    made = a.ctl_json("keys", "create", "limited", "--project", "Demo/dev/app", "--create")
    a.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", "60")
    rate = 10  # requests a second, alternating between the two
    passed: dict[str, int] = {"a": 0, "b": 0}
    refused = set()
    began = time.monotonic()
    n = 0
    # Under a minute, so nothing leaves the sliding window while it runs.
    while time.monotonic() - began < 55:
        name, cp = (("a", a), ("b", b))[n % 2]
        status, _, _ = ask(cp, made["key"])
        if status == 200:
            passed[name] += 1
        else:
            refused.add(status)
        n += 1
        time.sleep(max(0.0, began + n / rate - time.monotonic()))
    total = passed["a"] + passed["b"]
    print(f"{n} requests in 55 s, {total} let through ({passed}); alone, each would let 60 through")
    # Each hears the other's counts within a round (2 s): what the other let through meanwhile is the
    # most it can pass, 2 s of its traffic. Without the exchange, each would let its own 60 through.
    assert 60 <= total <= 60 + 2 * rate, passed
    assert passed["a"] and passed["b"]
    assert refused == {429}
