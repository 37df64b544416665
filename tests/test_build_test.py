"""What `python3 build.py test` decides before and around pytest (issue 26).

A fresh clone's `build.py test` on a Debian machine without slapd,
keepalived, openssh-server and nftables gave 59 failures and 72 errors; CI
passed only because .ci/run installed them first. Now build.py says, or as
root installs, what is missing; and runs the suite in two phases.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def build():
    spec = importlib.util.spec_from_file_location("build_for_test_command", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine(*absent: str):
    """A `present(kind, what)` for a machine that has everything but the programs, files and modules named."""
    return lambda kind, what: (what or kind) not in absent


def test_a_machine_with_everything_needs_no_package(build):
    assert build.missing_packages(machine()) == []


def test_the_fresh_machine_of_the_issue_is_told_the_packages_it_lacks_in_one_line(build):
    lacks = machine("/usr/sbin/slapd", "ldapadd", "keepalived", "/usr/sbin/sshd", "nft")
    missing = build.missing_packages(lacks)
    assert missing == ["keepalived", "openssh-server", "nftables", "slapd", "ldap-utils"]
    assert build.apt_line(missing) == ("sudo apt-get install --no-install-recommends "
                                       "keepalived openssh-server nftables slapd ldap-utils")


def test_postgresql_is_found_by_its_initdb_and_etcd_by_debian_pythons_module(build):
    lacks = machine("/usr/lib/postgresql/*/bin/initdb", "etcd")
    # "etcd" is both etcd-server's program and python3-etcd's module: both are asked for.
    assert build.missing_packages(lacks) == ["postgresql", "etcd-server", "python3-etcd"]


def test_a_python_without_the_venv_module_is_told_python3_venv(build):
    assert build.missing_packages(machine("venv")) == ["python3-venv"]


def test_every_package_ci_installed_is_asked_for(build):
    """The packages .ci/run installed before build.py did (issue 26), and those tests asked for since."""
    ci = {"postgresql", "patroni", "etcd-server", "python3-etcd", "keepalived", "curl", "openssh-server",
          "openssh-client", "nftables", "tmux", "sudo", "chromium-headless-shell", "fonts-dejavu-core", "nodejs",
          "npm", "slapd", "ldap-utils", "python3-venv"}
    # promtool and amtool check the shipped alerts, nginx and Caddy run the shipped proxies (issue 31).
    since = {"prometheus", "prometheus-alertmanager", "nginx-light", "caddy"}
    # code-server's native modules are built here, and VS Code's search runs ripgrep (issue 30).
    since |= {"g++", "make", "ripgrep"}
    nothing = build.missing_packages(lambda kind, what: False)
    assert sorted(nothing) == sorted(ci | since)


def test_without_root_the_line_is_printed_and_the_run_ends_before_anything_runs(build, monkeypatch, capsys):
    monkeypatch.setattr(build, "present_here", machine("tmux", "/usr/sbin/sshd"))
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(build, "install_packages", lambda missing: pytest.fail(f"installed {missing} as a user"))
    with pytest.raises(SystemExit) as exited:
        build.ensure_packages()
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert "  sudo apt-get install --no-install-recommends openssh-server tmux\n" in out


def test_as_root_the_missing_packages_are_installed_and_looked_for_again(build, monkeypatch):
    have = {"tmux": False}
    installed = []
    monkeypatch.setattr(build, "present_here", lambda kind, what: have.get(what, True))
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)

    def install(missing):
        installed.append(missing)
        have["tmux"] = True
    monkeypatch.setattr(build, "install_packages", install)
    build.ensure_packages()
    assert installed == [["tmux"]]


def test_as_root_a_package_still_missing_after_the_install_fails_the_run(build, monkeypatch, capsys):
    monkeypatch.setattr(build, "present_here", machine("tmux"))
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    monkeypatch.setattr(build, "install_packages", lambda missing: None)
    with pytest.raises(SystemExit) as exited:
        build.ensure_packages()
    assert exited.value.code == 1
    assert "tmux is still not there" in capsys.readouterr().err


def test_npm_installs_again_when_the_lock_file_is_newer_than_the_install(build, tmp_path):
    (tmp_path / "package-lock.json").write_text("{}")
    assert build.npm_stale(tmp_path)  # no node_modules
    installed = tmp_path / "node_modules" / ".package-lock.json"
    installed.parent.mkdir()
    installed.write_text("{}")
    os.utime(tmp_path / "package-lock.json", (1000, 1000))
    assert not build.npm_stale(tmp_path)
    os.utime(installed, (500, 500))
    assert build.npm_stale(tmp_path)


def test_no_arguments_or_only_builds_own_run_the_whole_suite_and_anything_else_goes_to_pytest(build):
    assert build.suite_options([]) == {"quick": False, "seed": None, "workers": build.TEST_WORKERS}
    assert build.suite_options(["--quick", "--seed", "42", "--workers=3"]) == {"quick": True, "seed": 42,
                                                                             "workers": 3}
    assert build.suite_options(["tests/test_docs.py"]) is None
    assert build.suite_options(["--quick", "-x"]) is None


def test_the_suite_runs_the_parallel_phase_then_the_serial_one_in_one_order(build, tmp_path):
    (parallel_name, parallel), (serial_name, serial) = build.suite_phases(quick=False, seed=7, workers=5,
                                                                          run=tmp_path)
    assert parallel[:4] == ["-n", "5", "--dist", "loadfile"]
    assert parallel[parallel.index("-m") + 1] == "not serial"
    assert serial[serial.index("-m") + 1] == "serial"
    assert serial[:2] == ["-n", "0"]
    for args in (parallel, serial):
        assert "--randomly-seed=7" in args
    assert "tests/benchmark/test_overhead.py" in serial  # only the files that hold serial tests are collected
    assert not any(arg.startswith("tests/") for arg in parallel)
    assert f"--basetemp={tmp_path / 'p'}" in parallel and f"--basetemp={tmp_path / 's'}" in serial
    quick = build.suite_phases(quick=True, seed=7, workers=5, run=tmp_path)
    assert [args[args.index("-m") + 1] for _, args in quick] == ["not serial and not slow", "serial and not slow"]


def test_each_run_has_its_own_folder_and_only_the_last_finished_one_and_those_running_are_kept(build, tmp_path):
    runs = tmp_path / "runs"
    oldest, last = build.suite_folder(runs), build.suite_folder(runs)
    running = build.suite_folder(runs)
    for folder, lock in (oldest, last):
        (folder / "p" / "popen-gw0").mkdir(parents=True)
        os.close(lock)  # finished
    os.utime(oldest[0], (1000, 1000))
    mine, lock = build.suite_folder(runs)
    try:
        wait_until(lambda: not any(entry.name.startswith("trash-") for entry in runs.iterdir()), timeout=30,
                 what="the earlier runs' folders removed")
        assert sorted(entry.name for entry in runs.iterdir()) == sorted([last[0].name, running[0].name, mine.name])
        assert len(str(mine / "p" / "popen-gw3")) < len(str(tmp_path)) + 30, "short: sockets live under it"
    finally:
        os.close(lock)
        os.close(running[1])


def test_the_summary_counts_a_phase_from_pytests_report(build, tmp_path):
    report = tmp_path / "phase.xml"
    report.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="1" failures="2" '
                      'skipped="3" tests="10" time="5.0"></testsuite></testsuites>')
    counts = build.junit_counts(report)
    assert counts == {"passed": 4, "failed": 2, "errors": 1, "skipped": 3}
    assert build.phase_line("serial", counts, 61.4) == "serial: 4 passed, 2 failed, 1 error, 3 skipped in 61 s"
    assert build.junit_counts(tmp_path / "none.xml") == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}


def test_measure_slow_lists_each_test_of_a_second_or_more_by_the_id_pytest_gives_it(build, tmp_path):
    build.TEST_REPORTS = tmp_path / "reports"
    build.TEST_REPORTS.mkdir()
    build.MEASURED_SLOW = tmp_path / "measured_slow.txt"
    build.MEASURED_SLOW.write_text("# what this list is\n\n9.0\ttests/old.py::test_not_run_this_time\n"
                                   "5.0\ttests/store/test_keys.py::test_a_key_is_kept\n")
    (build.TEST_REPORTS / "phase-1.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_ha" name="test_a_leader_is_elected[pg]" time="12.34"/>'
        '<testcase classname="tests.portal.test_pages.TestAdmin" name="test_the_page_shows" time="2.0"/>'
        '<testcase classname="tests.store.test_keys" name="test_a_key_is_kept" time="0.99"/>'
        '</testsuite></testsuites>')
    assert build.measure_slow() == 0
    assert build.MEASURED_SLOW.read_text() == (
        "# what this list is\n\n"
        "12.3\ttests/integration/test_ha.py::test_a_leader_is_elected[pg]\n"
        "9.0\ttests/old.py::test_not_run_this_time\n"  # left out of this run (--quick, one file): kept
        "2.0\ttests/portal/test_pages.py::TestAdmin::test_the_page_shows\n")  # test_a_key_is_kept: now fast

    # A list whose header has lost the blank line after it is read the same, and written with one again.
    build.MEASURED_SLOW.write_text("# what this list is\n9.0\ttests/old.py::test_not_run_this_time\n")
    assert build.measure_slow() == 0
    assert build.MEASURED_SLOW.read_text() == (
        "# what this list is\n\n"
        "12.3\ttests/integration/test_ha.py::test_a_leader_is_elected[pg]\n"
        "9.0\ttests/old.py::test_not_run_this_time\n"
        "2.0\ttests/portal/test_pages.py::TestAdmin::test_the_page_shows\n")


def test_every_collected_test_the_measured_list_names_is_marked_slow(request):
    # This run's own collection: each listed test it holds carries `slow`, so `-m "not slow"` (--quick)
    # leaves it out; in a quick run none of them is collected at all.
    listed = {line.split("\t", 1)[1].rstrip("\n") for line in (ROOT / "tests" / "measured_slow.txt").open()
              if "\t" in line and not line.startswith("#")}
    assert len(listed) > 100
    collected = [item for item in request.session.items if item.nodeid in listed]
    assert all(item.get_closest_marker("slow") is not None for item in collected)
    if "not slow" in (request.config.getoption("-m") or ""):
        assert collected == []

    # And the hook itself, on an item named in the list and one that is not.
    from tests import conftest

    class Item:
        def __init__(self, nodeid):
            self.nodeid, self.config, self.marks = nodeid, request.config, []

        def add_marker(self, mark):
            self.marks.append(mark.name)

    named, other = Item(sorted(listed)[0]), Item("tests/test_build_test.py::not_listed")
    for item in (named, other):
        conftest.pytest_itemcollected(item)
    assert (named.marks, other.marks) == (["slow"], [])
