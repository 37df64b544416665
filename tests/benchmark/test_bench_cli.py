"""The CLI's start-up bench runs, two runs a command, and prints its figures and goals; no bound is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cli.py"
FIGURES = {f"cli_{command}_{figure}" for command in ("help", "ctl_status")
           for figure in ("p50_ms", "p90_ms", "cpu_p50_ms", "goal_ms")}


def test_help_and_ctl_status_against_a_real_server_are_timed_and_their_goals_printed():
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = dict(re.findall(r"^(cli_\w+): (\S+) ms$", done.stdout, re.M))
    assert set(figures) == FIGURES, done.stdout
    assert all(float(value) > 0 for value in figures.values()), figures
    assert (figures["cli_help_goal_ms"], figures["cli_ctl_status_goal_ms"]) == ("150", "300")
    assert "llmgw --help: median" in done.stdout and "llmgw ctl status: median" in done.stdout
    assert "over 2 runs" in done.stdout
    assert "what `llmgw --help` spent most in importing" in done.stdout
