"""A stop signal that arrives while a program is still starting stops it in order, as one that arrives later does.

The CI of 2026-12-07 had `build.py run` stopped half a second after it started the agent: the agent died of
SIGSEGV inside orjson's module set-up. Measured by hand under load, a SIGINT in an agent's first second also lost
itself (the agent ran on) or ended Python's own start with a fatal error. The programs now start with the stop
signals blocked and take them once their loop can stop in order (llmgw/stopsignals.py); these tests send the
signal before the program has run a line, held pending from its very start as build.py starts it, so they meet the
earliest moment there is.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from llmgw import stopsignals
from llmgw.cli.main import Parser, main
from tests.support.agents import AgentProcess
from tests.support.waiting import wait_for


def started_held(argv: list[str], **kwargs) -> subprocess.Popen:
    """Popen with SIGINT and SIGTERM blocked, as build.py starts a server and an agent: the child inherits that."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, stopsignals.STOP_SIGNALS)
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def test_a_sim_engine_sent_sigint_before_it_started_comes_up_then_stops_in_order(tmp_path):
    proc = started_held([sys.executable, "-m", "llmgw", "sim-engine", "--port", "0"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # one that never took the signal: ended by the PID we started
            proc.kill()
            proc.wait()

    assert proc.returncode == 0, err
    assert "sim-engine sim listening on" in out
    assert "sim-engine sim stopped" in err
    assert "Traceback" not in err


def test_an_agent_sent_sigterm_before_it_started_stops_in_order_and_leaves_its_node_free(server, tmp_path):
    agent = AgentProcess(tmp_path, "early").join(server)
    log = open(agent.log_path, "ab")
    proc = started_held([sys.executable, "-m", "llmgw", "agent", "--config", str(agent.config)],
                        stdout=log, stderr=subprocess.STDOUT)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    finally:
        log.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    said = agent.output()
    assert rc == 0, said
    assert "control planes" in said  # it reached its loop, which took the signal
    assert "Traceback" not in said and "Fatal Python error" not in said
    # Its lock was let go: the same node starts again, and stops again, as a person would do next.
    agent.start()
    wait_for(lambda: agent.output().count("control planes") == 2 or agent.proc.poll() is not None, timeout=60)
    agent.stop()
    assert agent.proc.returncode == 0 and "already running" not in agent.output(), agent.output()


def mask_inside(run_marked: bool) -> set[int]:
    """The signals blocked while `llmgw`'s main runs a command, in a thread that had both blocked, as a held child."""
    seen: set[int] = set()

    def run(args) -> int:
        seen.update(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        return 0

    if run_marked:
        run = stopsignals.taken_by_the_program(run)
    parser = Parser(prog="llmgw")
    parser.add_subparsers(dest="command").add_parser("probe").set_defaults(run=run)

    def held_call() -> None:
        stopsignals.hold()
        main(["probe"], parser)

    thread = threading.Thread(target=held_call)
    thread.start()
    thread.join(timeout=30)
    return seen


def test_a_command_that_is_not_a_program_can_be_interrupted_at_once_even_when_started_held():
    assert not {signal.SIGINT, signal.SIGTERM} & mask_inside(run_marked=False)


def test_a_program_runs_with_the_stop_signals_held_until_its_loop_takes_them():
    assert {signal.SIGINT, signal.SIGTERM} <= mask_inside(run_marked=True)


def test_a_command_ended_by_a_usage_error_leaves_its_callers_signals_as_they_were():
    # The CI of 2026-12-07: a test's in-process `llmgw` call ended in a usage error before main released the
    # signals, and its thread's later children (an MCP server) could not be stopped with SIGTERM.
    after: set[int] = set()

    def call() -> None:
        try:
            main(["ctl", "--no-such-flag"])
        except SystemExit:
            pass
        after.update(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=30)
    assert not {signal.SIGINT, signal.SIGTERM} & after
