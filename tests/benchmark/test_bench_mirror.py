"""The mirror's bench runs on a 64 MB file and prints its figures; no bound is asserted, the ratio's included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mirror.py"
FIGURES = {"mirror_size_mb": "MB", "mirror_solo_mb_s": "MB/s", "mirror_together_mb_s": "MB/s",
           **{f"mirror_together_client_{i}_mb_s": "MB/s" for i in range(1, 5)},
           "mirror_together_ratio_percent": "%", "mirror_goal_percent": "%", "mirror_solo_cpu_s": "s",
           "mirror_together_cpu_s": "s", "mirror_solo_curl_cpu_s": "s", "mirror_together_curl_cpu_s": "s"}


def test_curl_alone_and_four_curls_at_once_read_a_held_file_over_mutual_tls_and_the_ratio_is_printed(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--size", "64MB"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {name: (float(value), unit) for name, value, unit in re.findall(r"^(mirror_\w+): (\S+) (\S+)$",
                                                                               done.stdout, re.M)}
    assert {name: unit for name, (_, unit) in figures.items()} == FIGURES, done.stdout
    assert figures["mirror_size_mb"][0] == 64
    assert figures["mirror_goal_percent"][0] == 80
    for name, (value, _) in figures.items():
        assert value > 0, f"{name}: {value}"
    solo, together = figures["mirror_solo_mb_s"][0], figures["mirror_together_mb_s"][0]
    # Each figure is printed to the nearest whole number, so each true value is within half of one of it, and the
    # ratio (itself rounded) within what those bounds give. A fixed point and a half once failed: solo 69 and
    # together 164 MB/s give 237.7% where 236% was printed from the unrounded 236.4.
    lowest, highest = 100 * (together - 0.5) / (solo + 0.5), 100 * (together + 0.5) / (solo - 0.5)
    assert lowest - 0.5 <= figures["mirror_together_ratio_percent"][0] <= highest + 0.5
    assert re.search(r"^  4 clients at once read \d+% of what curl alone reads: (meets|is UNDER) issue 27's 80%$",
                     done.stdout, re.M), done.stdout
    # Its folder, file and mirror are gone: only what the bench was given to work in is left, empty.
    assert list(tmp_path.iterdir()) == []


def test_a_file_larger_than_the_free_disk_is_refused_before_anything_is_written(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--size", "100TB"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 1
    assert "needs" in done.stderr and "MB free in" in done.stderr and "--size 256MB" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
