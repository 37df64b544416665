"""The simulated cluster benchmark runs at a small scale and prints its figures; no bound is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cluster.py"
FIGURES = ("cluster_join_ms", "cluster_connect_s", "cluster_place_all_s", "cluster_place_pass_ms",
           "cluster_reconcile_pass_ms", "cluster_leader_cpu_percent", "cluster_leader_cpu_per_heartbeat_round_ms",
           "cluster_leader_rss_mb", "cluster_agents_cpu_percent")


def test_twenty_simulated_agents_get_their_replicas_and_the_leaders_costs_are_printed():
    # 6 s of steady state: at least one heartbeat from every agent falls inside it.
    done = subprocess.run([sys.executable, str(BENCH), "--agents", "20", "--models", "2", "--replicas-each", "50",
                           "--steady", "6", "--joins", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = dict(re.findall(r"^(cluster_\w+): (\S+) \S+$", done.stdout, re.M))
    assert set(figures) == set(FIGURES), done.stdout
    for name, value in figures.items():
        assert float(value) >= 0, f"{name}: {value}"
    assert float(figures["cluster_reconcile_pass_ms"]) > 0
    assert float(figures["cluster_leader_cpu_per_heartbeat_round_ms"]) > 0
    assert "20 simulated agents" in done.stdout
    assert "2 nodes joined through the real flow, 18 issued here" in done.stdout
