"""The archive's bootstrap keeps a few unpacked versions of llmgw, not every one ever run on the machine."""

from __future__ import annotations

import importlib.util
import os
import time

from tests.support.pyz import ROOT

DAY = 86400


def _bootstrap():
    spec = importlib.util.spec_from_file_location("pyz_main_under_test", ROOT / "packaging" / "pyz_main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unpacking_a_version_removes_the_earlier_ones_unused_for_a_day_past_the_two_newest(tmp_path):
    boot = _bootstrap()
    now = time.time()
    ages = {"pyz-a-cp311": 1, "pyz-b-cp311": 2, "pyz-c-cp311": 3, "pyz-d-cp311": 4, "pyz-e-cp311": 0.5,
            "pyz-f-cp312": 9}
    for name, days in ages.items():
        (tmp_path / name / "lib").mkdir(parents=True)
        (tmp_path / name / "lib" / "llmgw.py").write_text("x")
        os.utime(tmp_path / name, (now - days * DAY - 60, now - days * DAY - 60))
    (tmp_path / "pyz-new-cp311").mkdir()

    boot._prune(str(tmp_path), str(tmp_path / "pyz-new-cp311"))

    # Kept: the new one and the two newest others (e, a); b, c and d come after those and have gone a day unused.
    # Another Python's versions are its own to keep.
    assert sorted(os.listdir(tmp_path)) == ["pyz-a-cp311", "pyz-e-cp311", "pyz-f-cp312", "pyz-new-cp311"]


def test_a_version_started_within_the_day_is_kept_however_many_came_after(tmp_path):
    boot = _bootstrap()
    now = time.time()
    for name, hours in (("pyz-a-cp311", 1), ("pyz-b-cp311", 2), ("pyz-c-cp311", 3)):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (now - hours * 3600, now - hours * 3600))

    boot._prune(str(tmp_path), str(tmp_path / "pyz-new-cp311"))

    assert sorted(os.listdir(tmp_path)) == ["pyz-a-cp311", "pyz-b-cp311", "pyz-c-cp311"]
