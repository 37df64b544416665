"""What `llmgw upgrade` refuses, and says, before and while it touches a machine: a real control plane, its CLI."""

from __future__ import annotations

import pytest

from tests.support.pyz import pyz, with_version  # noqa: F401 - pyz is a fixture


def test_a_version_this_control_plane_does_not_hold_is_refused_saying_what_to_give(server):
    done = server.ctl("upgrade", "9.9.9")
    assert done.returncode == 1
    assert done.stderr.strip() == ("llmgw: this control plane holds no llmgw 9.9.9 (it holds: none); give the "
                                   "llmgw.pyz or the offline bundle instead of the version")


def test_a_file_that_is_not_a_program_is_refused_before_it_is_sent(server, tmp_path):
    notes = tmp_path / "notes.pyz"
    notes.write_text("hello")
    done = server.ctl("upgrade", str(notes))
    assert done.returncode == 1
    assert "is not an llmgw.pyz (not a zip archive)" in done.stderr and "Traceback" not in done.stderr
    assert server.ctl_json("upgrade", "--status")["releases"] == []


def test_resume_and_rollback_with_no_upgrade_say_there_is_nothing_to_do(server):
    resumed = server.ctl("upgrade", "--resume")
    assert resumed.returncode == 1
    assert resumed.stderr.strip() == ("llmgw: there is no upgrade, so there is nothing to resume; start one with "
                                      "`llmgw upgrade FILE`")
    rolled = server.ctl("upgrade", "--rollback")
    assert rolled.stderr.strip() == "llmgw: there is no upgrade to roll back"


def test_two_things_at_once_are_refused_as_a_usage_error(server):
    done = server.ctl("upgrade", "0.2.0", "--resume")
    assert done.returncode == 1
    assert "give one of: FILE|VERSION (or --from-bundle FILE), --resume, --rollback, --status; got FILE|VERSION, " \
           "--resume" in done.stderr


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_control_plane_not_run_from_an_archive_stops_the_upgrade_saying_why_and_stays_as_it_was(
        server, pyz, tmp_path):
    newer = with_version(pyz, "0.2.0", tmp_path / "llmgw.pyz")
    done = server.ctl("upgrade", str(newer), timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wave 1: control plane cp1 (leader) 0.1.0 → 0.2.0: FAILED" in done.stdout
    assert ("STOPPED: Control plane cp1 was not upgraded: this llmgw was not started from an llmgw.pyz "
            "($LLMGW_PYZ is not set), so it cannot replace itself") in done.stdout
    assert "Where it stands: cp1 on 0.1.0." in done.stdout
    status = server.ctl_json("upgrade", "--status")
    assert status["upgrade"]["state"] == "stopped" and status["releases"] == ["0.2.0"]
    assert server.get("/health")[0] == 200
    # --resume carries on from the machine that stopped it, and stops there again while nothing changed.
    resumed = server.ctl("upgrade", "--resume", timeout=300)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert "wave 1: control plane cp1 (leader) 0.1.0 → 0.2.0: FAILED" in resumed.stdout
    audit = server.ctl_json("ctl", "audit", "--target", "cluster")
    assert [e["action"] for e in audit] == ["upgrade.resume", "upgrade.start"]
