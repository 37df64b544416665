"""How long a person waits for `llmgw --help` and `llmgw ctl status`.

Runs each as a fresh process, as a person's shell does, N times (`--runs`,
default 20, fewer past 20 s of runs) after one warm-up run; `llmgw ctl
status` against a real `llmgw server` this bench starts on free loopback
ports in a temporary folder and ends by its PID.

Prints:
  cli_help_p50_ms / _p90_ms: `llmgw --help`, wall time, start to exit
  cli_help_cpu_p50_ms: the same runs' CPU time (user + system); on a busy
    machine the wall time grows with the load while this barely moves
  cli_help_goal_ms: what `llmgw --help` is held to (issue 26)
  cli_ctl_status_p50_ms / _p90_ms / _cpu_p50_ms / _goal_ms: the same for
    `llmgw ctl status`
and, for people, the modules `llmgw --help` spent most in importing, as
`python -X importtime` counts them, since imports made at parse time are
what made it slow before.

Each run is timed with Python's compiled modules kept, as an installed
llmgw has them. A figure over its goal is said, never failed on: the time
depends on the machine and its load (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from llmgw.ports import unused_port

ROOT = Path(__file__).resolve().parent.parent

HELP_GOAL_MS = 150
STATUS_GOAL_MS = 300

# benchmarks/README.md's 60 s a bench: on a loaded machine a run can take
# seconds, so each command stops at this many seconds of runs, with no fewer
# than MIN_RUNS; the line under its figures says how many were made.
SECONDS_EACH = 20
MIN_RUNS = 3


def llmgw_command(*args: str) -> list[str]:
    # `python -m llmgw` from the checkout: the code under measurement, whichever
    # checkout the shared venv's `llmgw` script was installed from.
    return [sys.executable, "-m", "llmgw", *args]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    # As a person's machine runs it: Python keeps each module compiled in
    # __pycache__ (pip compiles an installed llmgw when it installs it). A
    # shell with PYTHONDONTWRITEBYTECODE set compiles every module on every
    # run, which measured more than the imports themselves.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run's wall and CPU time in ms; an exit other than 0 ends the bench, printing what it said."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile: a value that was measured, also for a handful of runs."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]


def measure(name: str, label: str, argv: list[str], env: dict[str, str], runs: int, goal_ms: int) -> None:
    """`runs` timed runs, fewer where they pass SECONDS_EACH (a loaded machine), but never under MIN_RUNS."""
    timed(argv, env)  # the warm-up: compiled .pyc files and the page cache, as a person's second run has
    walls: list[float] = []
    cpus: list[float] = []
    began = time.monotonic()
    while len(walls) < runs and (len(walls) < MIN_RUNS or time.monotonic() - began < SECONDS_EACH):
        wall, cpu = timed(argv, env)
        walls.append(wall)
        cpus.append(cpu)
    median = statistics.median(walls)
    print(f"{name}_p50_ms: {median:.0f} ms")
    print(f"{name}_p90_ms: {p90(walls):.0f} ms")
    print(f"{name}_cpu_p50_ms: {statistics.median(cpus):.0f} ms")
    print(f"{name}_goal_ms: {goal_ms} ms")
    verdict = "within" if median <= goal_ms else "OVER"
    print(f"  {label}: median {median:.0f} ms over {len(walls)} runs, {verdict} its goal of {goal_ms} ms",
          flush=True)


def slowest_imports(env: dict[str, str], shown: int = 8) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "llmgw", "--help"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)
    # "import time: self [us] | cumulative | imported package", the name indented by its depth.
    rows = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)$", done.stderr, re.M)
    top = sorted(((int(cumulative), name) for cumulative, depth, name in rows if not depth), reverse=True)
    print("  what `llmgw --help` spent most in importing (cumulative, one run):")
    for cumulative, name in top[:shown]:
        print(f"    {cumulative / 1000:6.1f} ms  {name}")


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmgw server exited {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"llmgw server did not answer /health in {seconds:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each command (default 20)")
    options = parser.parse_args(argv)
    env = environment()
    try:
        measure("cli_help", "llmgw --help", llmgw_command("--help"), env, options.runs, HELP_GOAL_MS)
        slowest_imports(env)
        with tempfile.TemporaryDirectory(prefix="llmgw-bench-cli-") as tmp:
            ports = {role: unused_port() for role in ("client", "agent", "admin", "metrics")}
            args = ["--data-dir", tmp, "--store", f"sqlite:{tmp}/llmgw.db",
                    *(a for role, port in ports.items() for a in (f"--listen-{role}", f"127.0.0.1:{port}"))]
            init = subprocess.run(llmgw_command("server", "init", *args, "--json"), capture_output=True, text=True,
                                  env=env, cwd=ROOT, timeout=120)
            if init.returncode != 0:
                raise RuntimeError(f"llmgw server init exited {init.returncode}:\n{init.stderr}")
            log = Path(tmp) / "server.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(llmgw_command("server", *args), stdout=out, stderr=subprocess.STDOUT,
                                        env=env, cwd=ROOT)
            try:
                wait_healthy(f"http://127.0.0.1:{ports['client']}", proc, log)
                status = llmgw_command("ctl", "status", "--admin", f"127.0.0.1:{ports['admin']}",
                                       "--token-file", str(Path(tmp) / "admin-token"))
                measure("cli_ctl_status", "llmgw ctl status", status, env, options.runs, STATUS_GOAL_MS)
            finally:
                stop(proc)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"bench_cli: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
