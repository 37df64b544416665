"""`build.py bench` stops a bench at 120 s, unless the bench names a longer limit of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_module():
    spec = importlib.util.spec_from_file_location("build_for_limits", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bench_is_stopped_at_the_common_limit_unless_it_names_its_own(tmp_path):
    build = build_module()
    plain = tmp_path / "bench_plain.py"
    plain.write_text('"""A bench."""\nLIMIT = 5  # not the line build.py reads\n')
    longer = tmp_path / "bench_longer.py"
    longer.write_text('"""A bench."""\nLIMIT_S = 300\n')

    assert build.bench_limit(plain) == build.BENCH_LIMIT_S == 120
    assert build.bench_limit(longer) == 300
    assert build.bench_limit(ROOT / "benchmarks" / "bench_portal.py") == 300
