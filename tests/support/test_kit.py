"""The test kit's own promises: a child that died fails its start at once, and a wait names what never came."""

from __future__ import annotations

import pytest

from tests.support.servers import SimEngine
from tests.support.waiting import wait_until


def test_a_sim_engine_that_dies_fails_its_start_with_what_it_said_rather_than_waiting_out_its_timeout(tmp_path):
    engine = SimEngine(tmp_path, "sim", "--no-such-flag")
    # A long timeout: were the death not noticed, the failure would say "did not answer /health" instead.
    with pytest.raises(AssertionError) as failed:
        engine.start(timeout=300)
    said = str(failed.value)
    assert "exited with 2 before answering /health" in said
    assert "--no-such-flag" in said


def test_a_wait_that_runs_out_fails_with_a_sentence_naming_what_never_happened():
    seen = []

    def never():
        seen.append(len(seen))
        return None

    with pytest.raises(AssertionError) as failed:
        wait_until(never, timeout=0.2, what="the usage row was written", interval=0.01)
    assert "the usage row was written" in str(failed.value)
    assert "never happened" in str(failed.value)
    assert len(seen) > 1


def test_a_wait_returns_the_value_it_waited_for():
    values = iter([0, None, "", "here"])
    assert wait_until(lambda: next(values), timeout=30, what="a value", interval=0.001) == "here"


def test_free_port_never_hands_out_the_same_port_twice():
    from tests.support.pgcluster import free_port

    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == 200


def test_a_terminal_reads_reverse_video_as_highlighted_and_a_colour_numbered_7_as_a_colour(tmp_path):
    # As a program writes them, read back through a real tmux: a row in reverse, and a colour numbered 7.
    import sys

    from tests.support.tmux import Terminal

    script = ("import sys; sys.stdout.write('\\x1b[38;5;7mgrey\\x1b[0m plain \\x1b[7mfocused row\\x1b[27m after\\n"
              "\\x1b[1;7mnext line\\x1b[m done\\n'); sys.stdout.flush(); input()")
    term = Terminal([sys.executable, "-c", script], {"PATH": "/usr/bin:/bin"}, str(tmp_path), tmp_path)
    try:
        term.wait_for("next line done")
        assert term.highlighted() == ["focused row", "next line"]
    finally:
        term.close()


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_a_copied_init_is_what_a_real_init_there_gives_but_for_the_secrets(tmp_path, extra):
    import json
    import re
    import stat

    from tests.support.servers import InitCopies, Server

    copies = InitCopies(tmp_path / "templates")
    real = Server(tmp_path / "real", "cp1")
    done_real = real.init(*extra)
    copied = Server(tmp_path / "copied", "cp1", copies=copies)
    done_copied = copied.init(*extra)
    assert copies.made, "the copy was not taken from a template"
    assert done_copied.returncode == done_real.returncode == 0, done_copied.stderr + done_real.stderr

    def shape(done, server):
        """The output with the secrets, and this server's own ports and paths, written as names."""
        text = done.stdout.replace(str(server.data_dir), "DATA")
        for role, port in server.ports.items():
            text = text.replace(str(port), role.upper())
        if extra:
            doc = json.loads(text)
            doc["administrator"]["password"] = "X"
            for made in ("key", "id", "prefix", "project_id", "person_id", "created_at"):
                doc["key"][made] = "X"
            return doc
        return re.sub(r"(password|key|Bearer)\s+\S+", r"\1 X", text)

    assert shape(done_copied, copied) == shape(done_real, real)
    for name in ("llmgw.db", "admin-token"):
        assert stat.S_IMODE((copied.data_dir / name).stat().st_mode) == \
            stat.S_IMODE((real.data_dir / name).stat().st_mode)
    # A second init on the copy is a real one, and finds the store set up.
    again = copied.init()
    assert "llmgw is already set up here (1 person)" in again.stdout


def test_a_port_another_live_process_was_given_is_passed_over_until_that_process_ends(tmp_path):
    import subprocess
    import sys

    from tests.support import pgcluster

    mine = pgcluster._Ports()
    mine.LEASES = str(tmp_path)  # this test's own leases, not the machine's
    # Another process (an xdist worker, another run) takes port 40123 and lives on until told.
    other = subprocess.Popen([sys.executable, "-c", "import sys\nfrom tests.support import pgcluster\n"
                              f"p = pgcluster._Ports(); p.LEASES = {str(tmp_path)!r}\n"
                              "assert p._lease(40123); print('leased', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline() == "leased\n"
        assert not mine._lease(40123)
    finally:
        other.communicate("", timeout=30)
    # Its process gone (its lease released, or left behind by a kill), the port may be given again.
    assert mine._lease(40123)
    (tmp_path / "40124").write_text("999999999")  # a holder that is no process
    assert mine._lease(40124)


def test_a_server_that_does_not_answer_in_time_is_stopped_rather_than_left_running(tmp_path):
    from tests.support.servers import Server

    server = Server(tmp_path, "slow")
    assert server.init().returncode == 0
    server.start(wait=False)
    with pytest.raises(AssertionError) as failed:
        server.wait_healthy(timeout=0)  # no server answers before it has even been looked at
    assert "did not answer /health in 0 s" in str(failed.value)
    assert server.proc.poll() is not None, "the server was left running after its start failed"
