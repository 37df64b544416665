#!/usr/bin/env python3
"""The one entry point for working on llmgw: run, test, bench, dist.

Standard library only, so that `python3 build.py …` works on a fresh clone
with nothing but the system's Python. Everything else lives in the checkout's
own virtual environment, .venv, which this script makes and keeps in step
with setup.cfg.
"""

import sys

# Checked before anything else is imported or defined, so that an old Python
# gets a sentence rather than a SyntaxError or an ImportError from below.
if sys.version_info < (3, 11):
    sys.stderr.write(
        "build: llmgw needs Python 3.11 or newer; this is Python %d.%d (%s).\n"
        "build: run it with a newer interpreter, e.g. `python3.11 build.py`.\n"
        % (sys.version_info[0], sys.version_info[1], sys.executable)
    )
    sys.exit(1)

import configparser
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
STAMP = VENV / "llmgw-setup.cfg.sha256"
SETUP_CFG = ROOT / "setup.cfg"
VAR = ROOT / "var"
BENCHMARKS = ROOT / "benchmarks"
BUILD = ROOT / "build"
DIST = ROOT / "dist"

# The convention in benchmarks/README.md is 60 s a bench; past this one is
# stuck, and it and whatever it started are stopped.
BENCH_LIMIT_S = 120

USAGE = """\
usage: python3 build.py COMMAND [ARGS...]

The one entry point for working on llmgw. Each command first makes or updates
the virtual environment .venv (llmgw installed editable, with its test
dependencies) when it is missing, broken, or setup.cfg has changed.

commands:
  run [ARGS...]      set up ./var once (`llmgw server init`), then run
                     `llmgw server` in the foreground with ./var as its data
                     directory; ARGS go to `llmgw server`. Ctrl-C stops it.
  test [ARGS...]     run the tests (`python -m pytest ARGS`; all of them when
                     no ARGS); pytest's exit status is passed through.
  bench [NAME...]    run each benchmarks/bench_*.py, or those named
                     (`bench_http`, `http` or `benchmarks/bench_http.py`),
                     one after another.
  dist               build dist/llmgw.pyz, one file carrying llmgw and its
                     pinned dependencies, runnable with `python3 llmgw.pyz`.

ARGS after the command are passed on untouched, `--help` included.
See docs/building.md.
"""


def say(message: str) -> None:
    try:
        print(f"build: {message}", flush=True)
    except BrokenPipeError:
        # Whoever read our output (a `| tee`) has gone; the work goes on.
        pass


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"build: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


# --- the virtual environment -------------------------------------------------


def setup_cfg_digest() -> str:
    return hashlib.sha256(SETUP_CFG.read_bytes()).hexdigest()


def base_python() -> str:
    """The interpreter to make .venv with: this one, or the one under it.

    When build.py is itself run by a virtual environment's python (even
    .venv's), making a venv from that would tie the new one to a directory
    that may be about to be deleted; the base installation is what it wraps.
    """
    if sys.prefix != sys.base_prefix:
        for name in (f"python{sys.version_info[0]}.{sys.version_info[1]}", "python3"):
            candidate = Path(sys.base_prefix) / "bin" / name
            if candidate.exists():
                return str(candidate)
    return sys.executable


def venv_python_works() -> bool:
    """Whether .venv's python starts and is new enough.

    A venv whose interpreter was removed (a pyenv version uninstalled, a
    Debian upgrade from 3.11 to 3.12) leaves a dangling symlink behind.
    """
    if not VENV_PYTHON.exists():
        return False
    try:
        result = subprocess.run(
            [str(VENV_PYTHON), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def ensure_venv() -> None:
    if VENV.exists() and not venv_python_works():
        say(f"{VENV.name} is broken (its python does not start); making it again")
        shutil.rmtree(VENV)
    if not VENV.exists():
        python = base_python()
        version = ".".join(map(str, sys.version_info[:3]))
        say(f"making the virtual environment {VENV.name} with {python} (Python {version})")
        result = subprocess.run([python, "-m", "venv", str(VENV)])
        if result.returncode != 0:
            shutil.rmtree(VENV, ignore_errors=True)
            fail(
                "could not make the virtual environment; on Debian or Ubuntu the venv "
                "module is a package of its own: apt-get install python3-venv"
            )
    digest = setup_cfg_digest()
    try:
        installed = STAMP.read_text().strip()
    except OSError:
        installed = ""
    if installed == digest:
        return
    why = "setup.cfg changed" if installed else "first install"
    say(f"installing llmgw (editable) and its test dependencies into {VENV.name} ({why})")
    result = subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "install", "--disable-pip-version-check",
         "--quiet", "-e", f"{ROOT}[test]"],
        cwd=ROOT,
    )
    if result.returncode != 0:
        fail(f"pip could not install the project into {VENV.name} (exit {result.returncode}); see above")
    # Written only after pip succeeded, so that a failed install is tried
    # again next time rather than taken as done.
    STAMP.write_text(digest + "\n")


# --- processes -----------------------------------------------------------------


def exit_status(returncode: int) -> int:
    """A child's return code as a shell would give it: 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def wait_through_interrupts(proc: subprocess.Popen) -> int:
    """Wait for a child that shares our terminal, and so gets Ctrl-C itself.

    The child (pytest) decides what an interrupt means; we only must not die
    of a KeyboardInterrupt traceback before it has finished.
    """
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


# --- run -----------------------------------------------------------------------


def cmd_run(args: list[str]) -> int:
    ensure_venv()
    llmgw = str(VENV / "bin" / "llmgw")
    if "-h" in args or "--help" in args:
        # Asking what `server` takes should not set up ./var first.
        return exit_status(wait_through_interrupts(subprocess.Popen([llmgw, "server", *args], cwd=ROOT)))
    if not VAR.exists():
        say(f"making {VAR.relative_to(ROOT)}/ for the server's data")
        VAR.mkdir(parents=True)
    # Relative paths on purpose, run from the checkout: `llmgw ctl` run from
    # here finds ./var/admin-token by itself.
    where = ["--data-dir", "./var", "--store", "sqlite:./var/llmgw.db"]

    say("llmgw server init " + " ".join(where))
    init = subprocess.Popen([llmgw, "server", "init", *where], cwd=ROOT)
    rc = wait_through_interrupts(init)
    if rc != 0:
        fail(f"`llmgw server init` failed (exit {exit_status(rc)}); see above", exit_status(rc) or 1)

    say("from another shell, in this checkout:  .venv/bin/llmgw ctl status")
    say("  (ctl finds ./var/admin-token by itself when run from here)")
    say("llmgw server " + " ".join(where + args) + "   (Ctrl-C stops it)")

    # In a process group of its own so that Ctrl-C reaches the server once,
    # from us, rather than twice (once from the terminal, once forwarded):
    # a second interrupt may mean "stop now" to it.
    started: list[subprocess.Popen] = []
    stopping: list[int] = []

    def forward(signum, _frame):
        stopping.append(signum)
        if started:
            pass_on(started[0], signum, first=len(stopping) == 1)

    def pass_on(server, signum, first):
        # SIGHUP (the terminal closed) would otherwise leave the server,
        # which is not in the terminal's foreground group, running alone.
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        # The signal before the message: under `build.py run | tee`, Ctrl-C
        # ends tee too, and a write to its pipe must not stop the passing on.
        try:
            os.kill(server.pid, sent)
        except ProcessLookupError:
            pass
        if first:
            say(f"stopping the server (pid {server.pid})")

    # Handlers first: a Ctrl-C between starting the server and handling it
    # would end build.py and leave the server, deaf to the terminal, behind.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    server = subprocess.Popen([llmgw, "server", *where, *args], cwd=ROOT, process_group=0)
    started.append(server)
    if stopping:
        pass_on(server, stopping[0], first=True)
    try:
        rc = server.wait()
    except BaseException:
        # build.py itself is going (an error of its own): never leave the
        # server, in a process group the terminal does not signal, behind.
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            server.wait()
        raise
    if stopping:
        # Ended by the signal we passed on, or exiting 0 or 128+N for it, is
        # the stop that was asked for.
        asked = {signal.SIGINT, signal.SIGTERM}
        if rc == 0 or -rc in asked or rc - 128 in asked:
            say("the server stopped")
            return 0
        fail(f"the server did not stop cleanly (exit {exit_status(rc)})", exit_status(rc))
    if rc != 0:
        fail(f"the server exited with status {exit_status(rc)}; see above", exit_status(rc))
    say("the server exited")
    return 0


# --- test ----------------------------------------------------------------------


def cmd_test(args: list[str]) -> int:
    ensure_venv()
    say("python -m pytest " + " ".join(args) if args else "python -m pytest (all tests)")
    rc = wait_through_interrupts(subprocess.Popen([str(VENV_PYTHON), "-m", "pytest", *args], cwd=ROOT))
    if rc == 5:
        # pytest's "no tests collected": a mistyped path or a -k that matches
        # nothing would otherwise look like a green run.
        fail("pytest collected no tests, which counts as a failure: check the paths and -k/-m given", 5)
    if rc != 0:
        say(f"tests failed (pytest exit {exit_status(rc)})")
    return exit_status(rc)


# --- bench ---------------------------------------------------------------------


def find_benches(names: list[str]) -> list[Path]:
    available = sorted(BENCHMARKS.glob("bench_*.py"))
    if not names:
        if not available:
            fail(f"there are no benchmarks yet: no {BENCHMARKS.relative_to(ROOT)}/bench_*.py")
        return available
    chosen = []
    for name in names:
        stem = Path(name).name.removesuffix(".py")
        if not stem.startswith("bench_"):
            stem = "bench_" + stem
        path = BENCHMARKS / f"{stem}.py"
        if not path.exists():
            listed = ", ".join(p.stem for p in available) or "none"
            fail(f"no benchmark named {name!r}; there are: {listed}", 2)
        chosen.append(path)
    return chosen


def run_bench(path: Path) -> int:
    """Run one bench in a process group of its own, bounded in time.

    The group is what lets a stuck bench be stopped together with the
    servers and engines it started, rather than leaving them on the ports
    the next bench wants.
    """
    proc = subprocess.Popen([str(VENV_PYTHON), str(path)], cwd=ROOT, process_group=0)

    def stop_group(sig):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def interrupt(signum, _frame):
        stop_group(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        try:
            return proc.wait(timeout=BENCH_LIMIT_S)
        except subprocess.TimeoutExpired:
            say(f"{path.name} ran past {BENCH_LIMIT_S} s; stopping it and what it started")
            stop_group(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop_group(signal.SIGKILL)
                proc.wait()
            return 124
        except KeyboardInterrupt:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop_group(signal.SIGKILL)
                proc.wait()
            fail(f"interrupted during {path.name}", 130)
    finally:
        signal.signal(signal.SIGINT, previous)


def cmd_bench(args: list[str]) -> int:
    ensure_venv()
    benches = find_benches(args)
    failed = []
    for path in benches:
        print(f"\n== {path.stem} ==", flush=True)
        started = time.monotonic()
        rc = run_bench(path)
        took = time.monotonic() - started
        if rc != 0:
            failed.append(path.stem)
            say(f"{path.stem} failed (exit {exit_status(rc)}) after {took:.1f} s")
        else:
            say(f"{path.stem} done in {took:.1f} s")
    print(flush=True)
    if failed:
        fail(f"{len(failed)} of {len(benches)} benchmarks failed: {', '.join(failed)}")
    say(f"{len(benches)} benchmark{'s' if len(benches) != 1 else ''} ran")
    return 0


# --- dist ----------------------------------------------------------------------


def install_requires() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    raw = cfg.get("options", "install_requires", fallback="")
    return [line.strip() for line in raw.splitlines() if line.strip() and not line.strip().startswith("#")]


def frozen_constraints(path: Path) -> None:
    """Pin the dependencies' own dependencies to what .venv has.

    setup.cfg pins what llmgw imports; aiohttp's multidict and yarl,
    cryptography's cffi, are whatever pip chose when .venv was made. The
    archive carries those same versions, the ones the tests ran against.
    """
    result = subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )
    lines = [line for line in result.stdout.splitlines() if "==" in line and not line.startswith("-e")]
    path.write_text("\n".join(lines) + "\n")


def payload_files(lib: Path) -> list[tuple[str, Path]]:
    files = []
    for path in sorted(lib.rglob("*")):
        rel = path.relative_to(lib)
        # bin/ holds the console scripts pip wrote for the dependencies
        # (pygmentize, apsw), with .venv's shebang: of no use in the archive.
        if path.is_dir() or rel.parts[0] == "bin" or "__pycache__" in rel.parts:
            continue
        if path.suffix in (".pyc", ".pyo"):
            continue
        files.append((rel.as_posix(), path))
    return files


def smoke_test(pyz: Path) -> None:
    """Run the archive the way a bare machine would, and see it answer.

    With `env -i` (no PATH to .venv, no PYTHONPATH), a fresh HOME (so its
    dependencies are unpacked from scratch) and the base interpreter under
    .venv, started with -I -S so that not even that installation's own
    site-packages can stand in for something the archive forgot.
    """
    python = os.path.realpath(VENV_PYTHON)
    with tempfile.TemporaryDirectory(prefix="llmgw-pyz-check-") as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home}
        result = subprocess.run(
            [python, "-I", "-S", str(pyz), "--version"],
            env=env, cwd=home, capture_output=True, text=True, timeout=300,
        )
    out = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        fail(f"the archive does not start ({python} -I -S {pyz.name} --version, exit {result.returncode}):\n{out}")
    say(f"checked with {python} -I -S in a bare environment: {out}")


def cmd_dist(args: list[str]) -> int:
    if args:
        fail(f"dist takes no arguments (got {' '.join(args)})", 2)
    ensure_venv()
    work = BUILD / "pyz"
    lib = work / "lib"
    if work.exists():
        shutil.rmtree(work)
    lib.mkdir(parents=True)

    requirements = work / "requirements.txt"
    requirements.write_text("\n".join(install_requires()) + "\n")
    constraints = work / "constraints.txt"
    frozen_constraints(constraints)
    say(f"installing the pinned dependencies from setup.cfg into {lib.relative_to(ROOT)}")
    result = subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
         "--no-compile", "--only-binary=:all:", "--target", str(lib),
         "-r", str(requirements), "-c", str(constraints)],
        cwd=ROOT,
    )
    if result.returncode != 0:
        fail(f"pip could not install the dependencies (exit {result.returncode}); see above")

    say("copying the llmgw package")
    shutil.copytree(
        ROOT / "llmgw", lib / "llmgw",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"),
    )

    files = payload_files(lib)
    # What the bootstrap checks before unpacking native modules built for
    # one interpreter into another, where the failure would be an obscure
    # ImportError from deep inside cryptography. Asked of .venv's python,
    # whose pip chose the wheels, not of the one running build.py.
    probe = subprocess.run(
        [str(VENV_PYTHON), "-c",
         "import json, platform, sys; print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
         "'implementation': sys.implementation.name, 'machine': platform.machine(), "
         "'system': platform.system()}))"],
        capture_output=True, text=True, check=True,
    )
    built_for = json.loads(probe.stdout)

    DIST.mkdir(exist_ok=True)
    pyz = DIST / "llmgw.pyz"
    partial = DIST / "llmgw.pyz.partial"
    say(f"writing {pyz.relative_to(ROOT)} ({len(files)} files)")
    # Fixed timestamps and sorted entries: the same inputs give the same
    # bytes, and so the same cache directory on every machine.
    stamp = (1980, 1, 1, 0, 0, 0)
    with open(partial, "wb") as out:
        out.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            def add(name: str, data: bytes, mode: int = 0o644) -> None:
                info = zipfile.ZipInfo(name, stamp)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (0o100000 | mode) << 16
                zf.writestr(info, data)

            add("__main__.py", (ROOT / "packaging" / "pyz_main.py").read_bytes())
            add("pyz-built-for.json", (json.dumps(built_for, sort_keys=True) + "\n").encode())
            for name, path in files:
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                add("lib/" + name, path.read_bytes(), mode)
    partial.chmod(0o755)
    os.replace(partial, pyz)

    size = pyz.stat().st_size
    say(f"{pyz.relative_to(ROOT)}: {size / 1e6:.1f} MB ({size} bytes), "
        f"for CPython {built_for['python']} on {built_for['system']} {built_for['machine']}")
    smoke_test(pyz)
    return 0


# --- main ----------------------------------------------------------------------

COMMANDS = {"run": cmd_run, "test": cmd_test, "bench": cmd_bench, "dist": cmd_dist}


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE, end="", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        print(USAGE, end="", file=sys.stderr)
        fail(f"unknown command {command!r}; it is one of: {', '.join(COMMANDS)}", 2)
    os.chdir(ROOT)
    return COMMANDS[command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
