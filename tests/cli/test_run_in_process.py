"""`llmgw.cli.main.run`: a command in the caller's process, its output captured, its status returned, no exit.

The tests' `Server.ctl` runs the admin commands this way (issue 26), so what
it reports must be what the program reports: the same words, the same
status, and the process left as it was found.
"""

from __future__ import annotations

import io
import subprocess
import sys

from llmgw.cli.main import run
from tests.support.inprocess_cli import llmgw_here, runs_here
from tests.support.pgcluster import free_port


def closed_port() -> int:
    """A loopback port nothing listens on, leased so no other test starts a listener there."""
    return free_port()


def token(tmp_path) -> str:
    path = tmp_path / "admin-token"
    path.write_text("t" * 40)
    path.chmod(0o600)
    return str(path)


def test_help_is_printed_to_the_stream_given_and_its_exit_becomes_the_status():
    out, err = io.StringIO(), io.StringIO()
    before = sys.stdout, sys.stderr, sys.stdin

    assert run(["--help"], out, err) == 0

    assert out.getvalue().startswith("usage: llmgw ")
    assert err.getvalue() == ""
    assert (sys.stdout, sys.stderr, sys.stdin) == before


def test_a_usage_error_is_status_2_with_the_programs_sentence_and_the_process_carries_on():
    out, err = io.StringIO(), io.StringIO()

    assert run(["ctl", "no-such-command"], out, err) == 2

    assert out.getvalue() == ""
    assert "llmgw: argument COMMAND: invalid choice: 'no-such-command'" in err.getvalue()


def test_a_refusal_is_status_1_with_its_sentence(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    port = closed_port()

    assert run(["ctl", "status", "--admin", f"127.0.0.1:{port}", "--token-file", token(tmp_path)], out, err) == 1

    assert err.getvalue().startswith(f"llmgw: no llmgw server answers at 127.0.0.1:{port}; is it running?")


def test_stdin_is_the_one_given(tmp_path):
    err = io.StringIO()
    argv = ["people", "add", "cy@example.com", "--name", "Cy", "--password-stdin",
            "--admin", f"127.0.0.1:{closed_port()}", "--token-file", token(tmp_path)]

    assert run(argv, io.StringIO(), err, stdin=io.StringIO("")) == 1

    assert "--password-stdin read an empty line" in err.getvalue()


def test_in_process_and_as_a_program_a_command_says_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # the same width for the help text, whatever the terminal
    for argv in (["keys", "--help"], ["ctl", "status", "--admin", f"127.0.0.1:{closed_port()}",
                                      "--token-file", token(tmp_path)], ["ctl", "model"]):
        here = llmgw_here(argv)
        there = subprocess.run([sys.executable, "-m", "llmgw", *argv], capture_output=True, text=True, timeout=60)
        assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there.stderr)


async def test_a_test_inside_an_event_loop_can_run_one(tmp_path):
    done = llmgw_here(["ctl", "status", "--admin", f"127.0.0.1:{closed_port()}", "--token-file", token(tmp_path)])

    assert done.returncode == 1 and "no llmgw server answers" in done.stderr


def test_the_commands_that_need_a_process_of_their_own_are_not_run_here():
    assert runs_here(["ctl", "status"]) and runs_here(["keys", "list"]) and runs_here(["node", "add"])
    assert not runs_here(["node", "add", "--ssh", "root@10.0.0.7"])
    assert not runs_here(["server", "init"]) and not runs_here(["console"]) and not runs_here([])
