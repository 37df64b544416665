"""The overhead benchmark runs, so a change that breaks or doubles it is seen; no bound is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmgw.benchmark import nginx

# serial: the bench pins the gateway to one core and the load to the other, and its figures mean something only
# with the machine to itself.
pytestmark = pytest.mark.serial


def test_the_gateways_overhead_is_measured_in_one_second_steps():
    done = subprocess.run([sys.executable, "-m", "llmgw", "ctl", "bench", "overhead", "--seconds", "1", "--traces",
                           "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results["steps"]) >= {"c1", "guard", "c32", "s64"}
    for step in results["steps"].values():
        assert step["failed"] == 0
    assert results["steps"]["c1"]["gateway_rps"] > 0
    assert results["steps"]["s64"]["gateway_streams_per_s"] > 0
    assert "added_p50_ms: " in done.stderr
    # The guard step refuses to run unless the baseline refused a planted key, so a figure here was measured with it on.
    assert results["steps"]["guard"]["gateway_rps"] > 0
    assert "guard.cost_p50_ms: " in done.stderr
    # Likewise the traces step unless the spans at ratio 1 reached its collector.
    assert results["steps"]["traces"]["spans_received"] > 0
    assert "traces.ratio1_cost_p50_ms: " in done.stderr
    if nginx.available():
        # The same gateway in front of nginx's fixed answers, each step answered whole (failed is 0 above).
        assert results["steps"]["nginx"]["s64_gateway_streams_per_s"] > 0
        assert "nginx.added_p99_ms: " in done.stderr
    else:
        assert "nginx: skipped: nginx is not installed" in done.stderr
