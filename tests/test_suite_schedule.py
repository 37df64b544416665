"""The parallel phase hands out the longest modules first, and those that run llmgw.pyz once it is built
(tests/support/schedule.py)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from tests.support.pyz import ROOT, uses_pyz
from tests.support.schedule import LongestFirstScheduling, mostly_waits

NEEDS = "tests/release/test_program.py"  # imports the `pyz` fixture
OTHER = "tests/test_pyz_inputs.py"  # imports ROOT and _inputs_digest from the same module, and builds nothing
THIRD = "tests/test_docs.py"


class Worker:
    """What the scheduler sees of one of xdist's workers: the tests it was sent."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_a_module_that_imports_the_archive_fixture_or_built_pyz_is_known_to_run_it_and_a_helper_import_is_not():
    assert uses_pyz((ROOT / NEEDS).read_text())  # a parenthesised import, a comment beside the name
    assert not uses_pyz((ROOT / OTHER).read_text())
    assert uses_pyz("from tests.support.pyz import BROKEN_SENTENCE, built_pyz\n")
    assert not uses_pyz("from tests.support.pyz import with_version, broken\n")
    assert not uses_pyz("import json\n")


def test_while_the_archive_is_built_workers_get_other_modules_first_and_its_modules_once_it_is_done():
    started = []

    def start_build(config):
        started.append(subprocess.Popen(["sleep", "60"], start_new_session=True))  # a build still going
        return started[-1]

    config = SimpleNamespace(getvalue={"tx": ["popen", "popen"]}.get, option=SimpleNamespace(loadscopereorder=True),
                             rootpath=ROOT)
    scheduler = LongestFirstScheduling(config, start_build=start_build, measured={})
    # The module that runs the archive has the most tests (and so the most seconds when none is measured):
    # it would be handed out first.
    collection = ([f"{NEEDS}::test_{i}" for i in range(6)] + [f"{OTHER}::test_{i}" for i in range(3)]
                  + [f"{THIRD}::test_{i}" for i in range(3)])
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    try:
        scheduler.schedule()
        assert len(started) == 1, "the build starts as the modules are handed out"
        modules = {collection[i].split("::")[0] for i in first.sent + second.sent}
        assert modules == {OTHER, THIRD}
        started[0].kill()
        started[0].wait()
        for index in first.sent:
            scheduler.mark_test_complete(first, index)
        assert {collection[i].split("::")[0] for i in first.sent[3:]} == {NEEDS}
    finally:
        scheduler.stop_build()
        for process in started:
            process.kill()
            process.wait()


def test_a_collection_without_such_a_module_starts_no_build():
    started = []
    config = SimpleNamespace(getvalue={"tx": ["popen"]}.get, option=SimpleNamespace(loadscopereorder=True),
                             rootpath=ROOT)
    scheduler = LongestFirstScheduling(config, start_build=lambda config: started.append(config), measured={})
    worker = Worker("gw0")
    scheduler.add_node(worker)
    scheduler.add_node_collection(worker, [f"{OTHER}::test_0", f"{THIRD}::test_0"])
    scheduler.schedule()
    assert started == [] and len(worker.sent) == 2


def test_a_module_measured_longer_is_handed_out_before_one_with_more_tests():
    config = SimpleNamespace(getvalue={"tx": ["popen"]}.get, option=SimpleNamespace(loadscopereorder=True),
                             rootpath=ROOT)
    # Ten quick tests in one module, a single 120 s one in the other (vLLM's, in a whole run of the suite).
    collection = [f"{OTHER}::test_{i}" for i in range(10)] + [f"{THIRD}::test_long"]
    scheduler = LongestFirstScheduling(config, start_build=lambda config: None,
                                       measured={f"{THIRD}::test_long": 120.0})
    worker = Worker("gw0")
    scheduler.add_node(worker)
    scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    assert collection[worker.sent[0]] == f"{THIRD}::test_long"


def first_modules(long: list[str]) -> list[str]:
    """The module each of three workers is handed first, given three long modules (130, 120 and 90 s measured)
    and a light one of three tests."""
    config = SimpleNamespace(getvalue={"tx": ["popen"] * 3}.get, option=SimpleNamespace(loadscopereorder=True),
                             rootpath=ROOT)
    collection = [f"{module}::test_long" for module in long] + [f"{OTHER}::test_{i}" for i in range(3)]
    measured = {f"{module}::test_long": seconds for module, seconds in zip(long, (130.0, 120.0, 90.0), strict=True)}
    scheduler = LongestFirstScheduling(config, start_build=lambda config: None, measured=measured)
    workers = [Worker(f"gw{i}") for i in range(3)]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    return [collection[w.sent[0]].split("::")[0] for w in workers]


def test_no_more_than_two_modules_of_a_minute_or_more_run_at_once_and_the_others_take_light_ones():
    heavy = ["tests/integration/test_upgrade.py", "tests/integration/test_ha.py", "tests/integration/test_cluster.py"]
    # The two longest first; the third worker is given the light module, not the third heavy one.
    assert first_modules(heavy) == [heavy[0], heavy[1], OTHER]


def test_a_module_marked_waits_is_not_counted_among_the_heavy_ones():
    # The rate limits' module is marked `waits`: a client sending at a set rate for 70 s.
    long = ["tests/integration/test_upgrade.py", "tests/integration/test_rate_limits.py",
            "tests/integration/test_cluster.py"]
    assert first_modules(long) == long


def test_waits_is_read_from_the_modules_own_pytestmark_alone_or_in_a_list():
    assert mostly_waits((ROOT / "tests/integration/test_rate_limits.py").read_text())
    assert mostly_waits("import pytest\npytestmark = [pytest.mark.integration, pytest.mark.waits]\n")
    assert not mostly_waits("import pytest\npytestmark = pytest.mark.serial\n")
    # A test marked alone does not make its module wait, nor a mention in a string.
    assert not mostly_waits("import pytest\n@pytest.mark.waits\ndef test_x():\n    pass\n")
    assert not mostly_waits('"""pytest.mark.waits is for modules."""\n')
