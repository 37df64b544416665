"""The parallel phase's scheduler: xdist's loadfile, the longest modules first but two heavy ones at most at
once, and those that run llmgw.pyz held back until it is built.

Twelve modules run the release archive (tests/support/pyz.py), which takes
one core for 73 s to build (three Pythons' wheels, then 145 MB zipped) and
longer beside the suite. Built by the first test that asked, it kept every
other worker that drew one of those modules waiting at its first fixture: in
the CI run of e4f6761, 96 s, 69 s, 60 s and 33 s of setup, while one core
did the build and the other had little to do; the parallel phase took 780 s.

Here the controller starts the build as soon as it knows a module will want
it, and until the build has ended it hands each worker the first module in
the queue that does not want it. A worker waits only where nothing else is
left.

The queue is in the order of the modules' measured seconds (the sum of
their tests' in tests/measured_slow.txt, FAST_TEST for each test not
listed there), longest first. xdist's own order, the modules with the most
tests first, left the long ones with few tests to the end: vLLM's 120 s
test, the upgrade's 135 s, on one worker while the other three had ended.
The same run's last three minutes left 30-47% of the two cores idle. But
no more than HEAVY_AT_ONCE modules of a minute or more run at once: the
other workers take the lighter ones meanwhile. A module marked `waits`
(a client sending at a set rate for a minute) is not counted among them.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

from tests.support.pyz import ROOT, uses_pyz

MEASURED_SLOW = ROOT / "tests" / "measured_slow.txt"
# The mean of the tests under 1 s in a whole run (4,279 of 4,651: 373 s; the CI run of e4f6761).
FAST_TEST = 0.09
# A module of a minute or more is heavy (ten of them: vLLM, the upgrade, the setup screens, three machines,
# HA, …), and no more than two run at once. Handed out all at once, longest first, two suites side by side ran
# all their heaviest together: vLLM's start starved its agent's heartbeats, its node was lost and its engine
# started a dozen times, and 7 tests failed of the pair (2026-12-07).
# The cap costs time alone: the heavy modules' 1,120 s made a chain of two at a time, and the phase took 685 s
# against 616 s without it (03aaa8c against efaa315). Of that chain, the rate limits' 77 s and HA's rpm test's
# 60 s were clients sending at a set rate, marked `waits` now and run beside the heavy ones.
HEAVY_SECONDS = 60.0
HEAVY_AT_ONCE = 2


def measured_slow(path: Path = MEASURED_SLOW) -> dict[str, float]:
    """The ids tests/measured_slow.txt lists (tests that took 1 s or more in a whole run), with their seconds."""
    with open(path, encoding="utf-8") as f:
        rows = (line.rstrip("\n").split("\t", 1) for line in f if "\t" in line and line[0] != "#")
        return {node: float(seconds) for seconds, node in rows}


class LongestFirstScheduling(LoadFileScheduling):
    def __init__(self, config: pytest.Config, log=None,
                 start_build: Callable[[pytest.Config], subprocess.Popen] | None = None,
                 measured: dict[str, float] | None = None) -> None:
        super().__init__(config, log)
        self._start_build = start_build or build_for_session
        self._measured = measured if measured is not None else measured_slow()
        self._wants_pyz: dict[str, bool] = {}
        self._waits: dict[str, bool] = {}
        self._build: subprocess.Popen | None = None
        self._ordered = False
        self._seconds: dict[str, float] = {}  # each module's measured seconds

    def schedule(self) -> None:
        if self.collection is None and self._build is None and self.collection_is_completed:
            # Before LoadScopeScheduling.schedule() fills the queue and hands out the first modules at once.
            collection = next(iter(self.registered_collections.values()), [])
            if any(self._needs_pyz(scope) for scope in {self._split_scope(nodeid) for nodeid in collection}):
                self._build = self._start_build(self.config)
        super().schedule()

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:
            # The first call: LoadScopeScheduling.schedule() has just filled the queue.
            self._ordered = True
            for nodeid in self.collection or ():
                scope = self._split_scope(nodeid)
                self._seconds[scope] = self._seconds.get(scope, 0.0) + self._measured.get(nodeid, FAST_TEST)
            for scope in sorted(self.workqueue, key=lambda scope: -self._seconds.get(scope, 0.0)):
                self.workqueue.move_to_end(scope)
        building = self._build is not None and self._build.poll() is None
        crowded = self._heavy_under_way() >= HEAVY_AT_ONCE

        def held(scope: str) -> bool:
            return (building and self._needs_pyz(scope)) or (crowded and self._heavy(scope))

        ready = next((scope for scope in self.workqueue if not held(scope)), None)
        if ready is not None:
            self.workqueue.move_to_end(ready, last=False)
        super()._assign_work_unit(node)

    def _heavy_under_way(self) -> int:
        """The heavy modules handed out and not finished, on every worker."""
        return sum(1 for units in self.assigned_work.values() for scope, tests in units.items()
                   if self._heavy(scope) and not all(tests.values()))

    def _heavy(self, scope: str) -> bool:
        """A module of HEAVY_SECONDS or more that is not marked `waits`."""
        if self._seconds.get(scope, 0.0) < HEAVY_SECONDS:
            return False
        if scope not in self._waits:
            self._waits[scope] = mostly_waits(self._source(scope))
        return not self._waits[scope]

    def _needs_pyz(self, scope: str) -> bool:
        if scope not in self._wants_pyz:
            self._wants_pyz[scope] = uses_pyz(self._source(scope))
        return self._wants_pyz[scope]

    def _source(self, scope: str) -> str:
        """The module's text ("" for a scope that is not a Python file: a doctest's text file)."""
        path = Path(self.config.rootpath) / scope
        return path.read_text() if path.suffix == ".py" and path.is_file() else ""

    def stop_build(self) -> None:
        """Ends a build still going when the session ends first (-x, an interrupt)."""
        if self._build is not None and self._build.poll() is None:
            # The build's own group: pip and the smoke tests under it go too.
            os.killpg(self._build.pid, signal.SIGTERM)
            try:
                self._build.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._build.pid, signal.SIGKILL)
                self._build.wait()


def mostly_waits(source: str) -> bool:
    """Whether a test module's own `pytestmark` (one mark or a list) holds `pytest.mark.waits`."""
    if "mark.waits" not in source:
        return False  # nearly every module, without parsing it
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            return any(isinstance(mark, ast.Attribute) and mark.attr == "waits" for mark in marks)
    return False


def build_for_session(config: pytest.Config) -> subprocess.Popen:
    """`python -m tests.support.pyz BASETEMP`: the archive built into the folder whose subfolders are the
    workers' basetemps, where their `pyz` fixture looks (tests/support/pyz.py, built_pyz)."""
    root = Path(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined] - pytest's own, set at start
    with open(root / "pyz-build.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "tests.support.pyz", str(root)], cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
