#!/usr/bin/env python3
"""The one entry point for working on llmgw: run, check, test, bench, locales, dist.

Standard library only, so that `python3 build.py …` works on a fresh clone
with nothing but the system's Python. Everything else lives in the checkout's
own virtual environment, .venv, which this script makes and keeps in step
with setup.cfg.
"""

import sys

# Checked before anything else is imported or defined, so that an old Python
# gets a sentence rather than a SyntaxError or an ImportError from below.
if sys.version_info < (3, 11):  # noqa: UP036 - the check is for the interpreters ruff's target leaves out
    sys.stderr.write(
        f"build: llmgw needs Python 3.11 or newer; this is Python {sys.version_info[0]}.{sys.version_info[1]} "
        f"({sys.executable}).\n"
        "build: run it with a newer interpreter, e.g. `python3.11 build.py`.\n"
    )
    sys.exit(1)

import configparser
import fcntl
import hashlib
import io
import itertools
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
STAMP = VENV / "llmgw-setup.cfg.sha256"
SETUP_CFG = ROOT / "setup.cfg"
VAR = ROOT / "var"
BENCHMARKS = ROOT / "benchmarks"
BUILD = ROOT / "build"
DIST = ROOT / "dist"
# What `dist` installed for each Python version, kept for the next build with the same pins.
WHEELS_CACHE: Path | None = BUILD / "dist-wheels"
INVOKED_FROM = ROOT

# The convention in benchmarks/README.md is 60 s a bench; past this one is
# stuck, and it and whatever it started are stopped.
BENCH_LIMIT_S = 120

USAGE = """\
usage: python3 build.py COMMAND [ARGS...]

The one entry point for working on llmgw. Each command first makes or updates
the virtual environment .venv (llmgw installed editable) when it is missing,
broken, or setup.cfg has changed: `run`, `bench` and `dist` install what llmgw
runs on, `check` only the checkers, `test` adds the test tools, the checkers
and the similar-question embedder (torch, CPU build).

commands:
  run [--model GGUF] [ARGS...]
                     set up ./var once (`llmgw server init`), then run a
                     control plane (`llmgw server`, ARGS go to it) and a node
                     (`llmgw agent`, joined once, in ./var/node) serving the
                     model `sim` and, with --model PATH or
                     hf:ORG/REPO/FILE.gguf[@REV], that GGUF on llama.cpp.
                     Says when each model is ready and how to try it.
                     Ctrl-C stops both and the node's engines. One run a
                     directory: a second on the same ./var is refused.
  check              run the checks CI runs before the tests: ruff's lint
                     (ruff.toml), mypy's types (setup.cfg's [mypy]), the layers
                     (import-linter's contracts in .importlinter; a package
                     importing a floor above its own fails it), and a count
                     of imports that reach past a package's face (a figure,
                     never a failure). Exits 1 when a check fails.
  test [--quick] [--seed N] [--workers N]
                     install what the tests run on and is missing (Debian's
                     packages as root, else the apt-get line to run; npm's
                     and pip's), then run every test: those not marked
                     serial on several workers, then the serial ones one at
                     a time, in a random order whose seed is printed.
                     --quick leaves out the tests marked slow.
  test ARGS...       `python -m pytest ARGS` (one file, -k, …); pytest's exit
                     status is passed through.
  bench [NAME...]    run each benchmarks/bench_*.py, or those named
                     (`bench_http`, `http` or `benchmarks/bench_http.py`),
                     one after another.
  locales            extract every sentence marked for translation (N_() in
                     llmgw/, _() in the portal's templates) into
                     locales/llmgw.pot, list each language's missing ones,
                     and compile locales/<lang>/LC_MESSAGES/*.po into the
                     portal's catalogues (`run`, `test` and `dist` compile
                     too). Exits 1 when a language lacks a sentence.
  dist [--python X.Y ...] [--bundle [--wheels DIR]]
                     build dist/llmgw.pyz, one file carrying llmgw and its
                     pinned dependencies, runnable with `python3 llmgw.pyz`
                     under each CPython version carried (default 3.11, 3.12
                     and 3.13; --python, repeatable, names others). With
                     --bundle, also dist/llmgw-VERSION-bundle.tar: the
                     program, the llama.cpp engine's xllamacpp wheel for
                     this architecture (pip download, or taken from --wheels
                     DIR) and their sha256s, for a site with no registry
                     (`llmgw upgrade --from-bundle FILE`, docs/upgrade.md).

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


# setup.cfg's extras each command installs beside the runtime. `run` took
# ~2.5 min and 1.6 GB for the test tools and torch before its first answer
# (issue 11); it needs only the openai SDK its printed line uses.
RUN_EXTRAS = ("sdk",)
# The sim's --embedding-model tests need the embedder, so `test` takes it too;
# tests/test_layers.py runs import-linter, so it takes `check`'s tools as well.
TEST_EXTRAS = ("sdk", "test", "similar", "check")
# `check` runs the checkers only: no llmgw server, SDK or torch is needed.
CHECK_EXTRAS = ("check",)

# torch's own index of CPU builds. PyPI's torch for Linux is the CUDA build,
# several GB with its nvidia-* wheels; this index's 2.13.0+cpu matches
# setup.cfg's torch==2.13.0 and, being a local version, is preferred to it.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_INDEX_ENV = "LLMGW_TORCH_INDEX"

# pip -q said nothing for minutes; while one step is quiet this long (a
# large wheel downloading), a line says pip is still at it.
PIP_QUIET_S = 15
PIP_DETAILS = ("Attempting uninstall", "Found existing installation", "Uninstalling ", "Successfully uninstalled")


def installed_extras() -> set[str] | None:
    """The extras .venv holds for the setup.cfg it was installed from, or None if that is another setup.cfg."""
    try:
        lines = STAMP.read_text().split()
    except OSError:
        return None
    if not lines or lines[0] != setup_cfg_digest():
        return None
    # A stamp from before the extras were split (the digest alone) was
    # written by an install of everything then in [test].
    return set(lines[1].split(",")) - {""} if len(lines) > 1 else {"sdk", "test", "similar"}


def torch_index_args() -> list[str]:
    """--extra-index-url for torch's CPU builds, when that index answers from here.

    LLMGW_TORCH_INDEX names a mirror of it instead, or, set empty, none: a
    site whose pip already reaches its own CPU wheels (an index or
    find-links in pip.conf) skips the check.
    """
    index = os.environ.get(TORCH_INDEX_ENV, TORCH_CPU_INDEX).strip()
    if not index:
        return []
    try:
        with urllib.request.urlopen(index.rstrip("/") + "/torch/", timeout=5):  # noqa: S310 - the index the user set
            pass
    except (OSError, ValueError) as e:
        say(f"torch's CPU index {index} did not answer ({getattr(e, 'reason', e)}); torch comes from the "
            "indexes pip is configured for, where PyPI's is the CUDA build of several GB. To use a mirror "
            f"of the CPU index: {TORCH_INDEX_ENV}=URL python3 build.py test")
        return []
    return ["--extra-index-url", index]


def pip_install(args: list[str]) -> int:
    """`pip install ARGS` into .venv, its steps passed on a line each with the seconds since it began.

    pip draws progress bars only on a terminal, and -q says nothing at all;
    its own lines (collecting, downloading with the size, installing) are
    progress anywhere. Its errors go to stderr untouched.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(VENV_PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *args],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, errors="replace", bufsize=1,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    out = proc.stdout
    assert out is not None  # stdout=PIPE: typeshed types every Popen stream Optional

    def read() -> None:
        for line in out:
            lines.put(line.rstrip())
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    last = "starting"
    while True:
        try:
            line = lines.get(timeout=PIP_QUIET_S)
        except queue.Empty:
            say(f"pip [{time.monotonic() - started:5.0f} s] still at: {last}")
            continue
        if line is None:
            break
        # What is already there is not a step; on a second install it is
        # every line.
        if not line.strip() or line.startswith("Requirement already satisfied"):
            continue
        say(f"pip [{time.monotonic() - started:5.0f} s] {line.strip()}")
        # Replacing an older package is a detail of the install step, not
        # what pip is still at while it unpacks torch.
        if not line.strip().startswith(PIP_DETAILS):
            last = line.strip()
    return proc.wait()


def ensure_venv(extras: tuple[str, ...] = RUN_EXTRAS) -> None:
    """Make .venv, and install llmgw with EXTRAS into it unless it already holds them for this setup.cfg."""
    if VENV.exists() and not venv_python_works():
        say(f"{VENV.name} is broken (its python does not start); making it again")
        shutil.rmtree(VENV)
    if not VENV.exists():
        if not present_here("venv", "") and os.geteuid() == 0:
            # A fresh Debian has python3 without its venv module; as root, every command (CI's `check`
            # first) installs it, as `test` installs its other packages.
            say("this python has no venv module; installing Debian's python3-venv")
            install_packages(["python3-venv"])
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
    have = installed_extras()
    if have is not None and set(extras) <= have:
        return
    why = "setup.cfg changed" if STAMP.exists() and have is None else "first install" if have is None else \
        f"adding {', '.join(sorted(set(extras) - have))}"
    say(f"installing llmgw[{','.join(extras)}] (editable) into {VENV.name} ({why})")
    index = torch_index_args() if "similar" in extras else []
    # The test tools bring torch, transformers and scipy, tens of thousands of modules the suite mostly never
    # imports: pip compiling them all was about half of a fresh clone's install (torch alone 23.6 -> 9.0 s
    # without). The suite writes bytecode as it imports (pytest_env), so what it uses is compiled once.
    no_compile = ["--no-compile"] if "test" in extras else []
    started = time.monotonic()
    rc = pip_install([*index, *no_compile, "-e", f"{ROOT}[{','.join(extras)}]"])
    if rc != 0:
        fail(f"pip could not install the project into {VENV.name} (exit {rc}); see above")
    say(f"installed in {time.monotonic() - started:.0f} s")
    # Written only after pip succeeded, so that a failed install is tried
    # again next time rather than taken as done. After a change of
    # setup.cfg only what was installed now counts: the other extras'
    # packages may be at their old pins.
    keep = set(extras) | (have or set())
    STAMP.write_text(f"{setup_cfg_digest()}\n{','.join(sorted(keep))}\n")


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


# Tests give `run` a directory of their own, so that they neither read nor
# overwrite a person's ./var. People use ./var: it is what `llmgw ctl` run
# from the checkout finds by itself.
RUN_DIR_ENV = "LLMGW_RUN_DIR"

# The name this machine's agent joins the cluster under (`llmgw ctl nodes`).
NODE_NAME = "local"

# `llmgw server`'s own defaults, for the flags build.py reads to know where
# to reach what it started (llmgw/cli/server.py).
LISTEN_DEFAULTS = {"client": ":8080", "agent": ":7443", "admin": "127.0.0.1:9090", "metrics": ":9091"}

MB = 1 << 20
GB = 1 << 30

# The agent stops its engines before it exits, each with up to 30 s of grace
# (the supervisor's stop_all); past this, a child is killed.
STOP_GRACE_S = 60
# What a child is started with blocked (Cluster.start), and takes once it can stop in order.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# One `llmgw ctl` is about 0.6 s of a core: the replicas are asked about
# this often, and only until every model has a ready one.
WATCH_EVERY_S = 2.0


def cmd_run(args: list[str]) -> int:
    ensure_venv()
    compile_locales()
    llmgw = str(VENV / "bin" / "llmgw")
    if "-h" in args or "--help" in args:
        # Asking what `server` takes should not set up ./var first.
        return exit_status(wait_through_interrupts(subprocess.Popen([llmgw, "server", *args], cwd=ROOT)))
    given, server_args = split_run_args(args)
    # Checked before anything starts: a mistyped path is a sentence, not a
    # server and an agent started for nothing.
    models = [sim_model()] + [gguf_model(g) for g in given]
    return Cluster(llmgw, server_args, models).run()


def split_run_args(args: list[str]) -> tuple[list[str], list[str]]:
    """build.py's own --model (repeatable), and the rest for `llmgw server`."""
    models, rest = [], []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--model":
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                fail("--model needs a GGUF: a path, or hf:ORG/REPO/FILE.gguf[@REVISION]", 2)
            models.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("--model="):
            models.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return models, rest


def listen_addresses(server_args: list[str]) -> dict[str, str]:
    """The server's listeners as its command line sets them (server.yaml's are not read)."""
    found = dict(LISTEN_DEFAULTS)
    for i, arg in enumerate(server_args):
        for role in found:
            flag = f"--listen-{role}"
            if arg == flag and i + 1 < len(server_args):
                found[role] = server_args[i + 1]
            elif arg.startswith(flag + "="):
                found[role] = arg.split("=", 1)[1]
    return found


def dial(address: str) -> str:
    """HOST:PORT to reach a listener on this machine: every interface is reached on loopback."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::", "*"):  # noqa: S104 - read, not bound: every interface is reached on loopback
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def sim_model() -> dict:
    return {"name": "sim", "source": "", "engine": "sim", "cores": None, "memory": None,
            "what": "the sim engine, answering at a set speed"}


def gguf_model(given: str) -> dict:
    """A llama.cpp model from --model: its catalog name, source, and the cores and memory its replica keeps."""
    if given.startswith("hf:"):
        source = given
        size = hf_size(given)
        what = f"llama.cpp, {given}" + (f", {size / GB:.1f} GB" if size else "")
    else:
        path = Path(given).expanduser()
        if not path.is_absolute():
            path = INVOKED_FROM / path
        path = path.resolve()
        if not path.is_file():
            fail(f"--model {given}: there is no file {path}", 2)
        source, size = str(path), path.stat().st_size
        what = f"llama.cpp, {path} ({size / MB:.1f} MB)"
    cpus = os.cpu_count() or 1
    if size:
        # A core for each 512 MB of weights, all of them from 4 GB on a
        # typical machine; memory as `llmgw ctl model serve` keeps for a
        # local file: the file and a quarter more, at least 1 GB more, for
        # its KV cache and the engine itself.
        cores = max(1, min(cpus, math.ceil(size / (512 * MB))))
        memory = f"{math.ceil((size + max(size // 4, GB)) / MB)}MB"
    else:
        cores, memory = min(cpus, 4), None  # serve's own 4 GB, saying so
    return {"name": model_name(source), "source": source, "engine": "llamacpp", "cores": cores, "memory": memory,
            "what": what}


def model_name(source: str) -> str:
    """What clients ask for: the file's name without .gguf, lowercased, as `llmgw ctl model serve` names it."""
    last = source.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if source.startswith("hf:"):
        last = last.split("@", 1)[0]
    stem = re.sub(r"\.gguf$", "", last.split(":", 1)[-1], flags=re.IGNORECASE)
    name = re.sub(r"[^A-Za-z0-9._:-]+", "-", stem).strip("-._:").lower()
    return name[:128] or "model"


def hf_size(source: str) -> int:
    """An hf: file's size from Hugging Face's answer to a HEAD, or 0 when it cannot be asked.

    Only the first answer is read: its redirect, followed by urllib, would
    turn into a GET of the whole file.
    """
    path, _, revision = source[len("hf:"):].partition("@")
    parts = path.strip("/").split("/")
    if len(parts) < 3:
        fail(f"--model {source}: an hf: source is hf:ORG/REPO/FILE.gguf[@REVISION]", 2)
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = (f"{endpoint}/{parts[0]}/{parts[1]}/resolve/{urllib.parse.quote(revision or 'main', safe='')}/"
           f"{urllib.parse.quote('/'.join(parts[2:]))}")

    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    headers = {"Authorization": f"Bearer {os.environ['HF_TOKEN']}"} if os.environ.get("HF_TOKEN") else {}
    try:
        with urllib.request.build_opener(Stay).open(urllib.request.Request(url, method="HEAD", headers=headers),  # noqa: S310 - HF_ENDPOINT, as huggingface_hub reads it
                                                    timeout=10) as r:
            return int(r.headers.get("X-Linked-Size") or r.headers.get("Content-Length") or 0)
    except urllib.error.HTTPError as e:
        return int(e.headers.get("X-Linked-Size") or 0) if 300 <= e.code < 400 else 0
    except (OSError, ValueError):
        return 0


# Which of a model's replicas says how it is doing: the furthest along, then the newest.
STATE_ORDER = {"ready": 0, "starting": 1, "pending": 2, "draining": 3, "failed": 4, "stopped": 5}


def replica_state(replicas: list[dict]) -> tuple[str, str]:
    """(a model's state, a line saying it) from its replicas in `llmgw ctl replicas --json`."""
    ready = [r for r in replicas if r.get("state") == "ready"]
    if ready:
        return "ready", f"ready on node {ready[0].get('node')} ({len(ready)} replica{'s' * (len(ready) > 1)})"
    if not replicas:
        return "waiting", "waiting for a replica"
    r = min(replicas, key=lambda r: (STATE_ORDER.get(str(r.get("state")), 9), -(r.get("since") or 0)))
    state = str(r.get("state"))
    fetch = r.get("fetch") or {}
    if fetch and state in ("pending", "starting"):
        done, total = fetch.get("bytes_done") or 0, fetch.get("bytes_total") or 0
        phase = fetch.get("phase") or "fetching"
        figures = f", {done * 100 // total}% of {total / MB:.0f} MB" if total else (
            f", {done / MB:.0f} MB" if done else "")
        return f"starting:{phase}", f"{phase} its weights{figures}"
    message = (r.get("message") or "").removeprefix(f"{state}: ")
    line = f"{state} on node {r.get('node')}" + (f": {message}" if message else "")
    if state in ("failed", "stopped"):
        # A replica its node came back without (the last run's, stopped
        # with the agent) waits this out too before it is replaced.
        line += " (a replica that ended is replaced 30 s after it did)"
    return state, line


class RunLock:
    """One `build.py run` a run directory: an flock on DIR/run.lock, holding the holder's pid and URL.

    Two runs on one ./var share the node's identity: the second run's agent
    adopted the first's engines and stopped them when it gave up (issue 11).
    The lock, not the file, says whether a run is alive: the kernel lets go
    of an flock when its holder dies, so the file a crashed run leaves
    behind never blocks the next one; the pid and URL in it are only for
    the sentence to the person who started the second run.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd = -1

    def take(self, url: str) -> dict | None:
        """Hold the lock and return None, or leave it and return what the holder wrote ({} when unreadable)."""
        # Opened without O_TRUNC: the holder's pid and URL must survive a refused opener.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}  # the holder is between taking the lock and writing to it
            os.close(fd)
            return holder if isinstance(holder, dict) else {}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "url": url}).encode() + b"\n", 0)
        # Close-on-exec: a server or agent that inherited it would hold the
        # lock after build.py had gone, and refuse the next run for nothing.
        self.fd = fd
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def listening_inodes(port: int) -> set[str] | None:
    """The socket inodes listening on PORT (any address), from /proc/net; None where there is no /proc."""
    found: set[str] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; field 9 is the inode.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found if seen else None


def group_holds_listener(pgid: int, port: int) -> bool:
    """Whether a process of process group PGID (a server and its workers) listens on PORT.

    How build.py knows the /health that answers is its own server's, not
    another's already on the port: the second run of issue 11 took the
    first run's server for its own. Where /proc cannot say, the answer is
    yes, as before.
    """
    inodes = listening_inodes(port)
    if inodes is None:
        return True
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            # Fields after the command's closing parenthesis: state, ppid, pgrp.
            if int(stat[stat.rfind(b")") + 2:].split()[2]) != pgid:
                continue
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) in wanted:
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def show(line: str = "") -> None:
    """A line for people to copy (a command), without say()'s prefix."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        pass


class Stop(Exception):
    """Starting up ends here: asked to stop, or a step failed and said why."""


def taken_listeners(listen: dict[str, str]) -> dict[str, str]:
    """The server's listeners (role: ADDRESS) whose port something on this machine listens on already.

    Checked before `llmgw server init`: a second run in a new directory on
    the first run's ports set up a store and printed a password and a key
    for a server that then could not start (issue 25). Any address counts:
    the server's wildcard listeners take the port on every one.
    """
    taken = {}
    for role, address in listen.items():
        port = address.rpartition(":")[2]
        if port.isdigit() and listening_inodes(int(port)):
            taken[role] = address
    return taken


def free_port_after(port: int) -> int:
    """The first port above PORT that nothing listens on, for the sentence that suggests one."""
    for candidate in range(port + 1, min(port + 200, 65536)):
        if not listening_inodes(candidate):
            return candidate
    return port + 1


def read_first_admin(path: Path) -> tuple[str, str] | None:
    try:
        words = path.read_text().split()
    except OSError:
        return None
    return (words[0], words[1]) if len(words) == 2 else None


class Cluster:
    """A control plane and one agent on this machine, started together and stopped together.

    Both run in process groups of their own, so that Ctrl-C reaches each once,
    from us, rather than twice (once from the terminal, once passed on): a
    second interrupt may mean "stop now" to the server.
    """

    def __init__(self, llmgw: str, server_args: list[str], models: list[dict]):
        self.llmgw = llmgw
        self.server_args = server_args
        self.models = models
        given = os.environ.get(RUN_DIR_ENV)
        # Relative paths on purpose for ./var, run from the checkout: `llmgw
        # ctl` run from here finds ./var/admin-token by itself.
        self.dir = Path(given).resolve() if given else VAR
        self.named = str(self.dir) if given else "./var"
        self.node_dir = self.dir / "node"
        self.listen = listen_addresses(server_args)
        self.client_url = f"http://{dial(self.listen['client'])}"
        self.admin = dial(self.listen["admin"])
        self.token_file = self.dir / "admin-token"
        self.run_lock = RunLock(self.dir / "run.lock")
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping: list[int] = []
        self.signalled: set[str] = set()
        self.api_key = ""
        # The first administrator's e-mail and password, kept (0600) by init
        # (--keep-password) so that every later run can say how to sign in.
        self.first_admin_file = self.dir / "first-admin"
        # What init printed, shown once the server is up: its password and key
        # are for a server that answers, never for one that failed to start.
        self.init_said: list[str] = []
        self.watching: dict[str, tuple[str, str, float]] = {}
        self.next_watch = 0.0
        self.agent_started = 0.0
        self.hinted: set[str] = set()
        self.first_ready = True
        self.failed = ""

    # -- signals and children

    def on_signal(self, signum, _frame) -> None:
        self.stopping.append(signum)
        for name, child in list(self.children.items()):
            if child.returncode is None:  # one reaped already may have had its PID given to another
                self.pass_on(name, child, signum, first=name not in self.signalled)
                if len(self.stopping) == 1:
                    # The rest in turn, from finish(), once this one has
                    # stopped: the server first, so that its connections to
                    # the engines are closed before they stop — llama.cpp's
                    # server waits on an open keep-alive connection (30 s,
                    # until the agent kills it).
                    break

    def pass_on(self, name: str, child: subprocess.Popen, signum: int, first: bool) -> None:
        # SIGHUP (the terminal closed) would otherwise leave the children,
        # which are not in the terminal's foreground group, running alone.
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        # The signal before the message: under `build.py run | tee`, Ctrl-C
        # ends tee too, and a write to its pipe must not stop the passing on.
        self.signalled.add(name)
        try:
            os.kill(child.pid, sent)
        except ProcessLookupError:
            pass
        if first:
            say(f"stopping the {name} (pid {child.pid})")

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        # Started with SIGINT and SIGTERM blocked, which a child inherits: a server or agent takes them once its
        # loop can stop in order (llmgw/stopsignals.py). A Ctrl-C in its first second otherwise landed in
        # Python's own start (exit 1) or orjson's (SIGSEGV), both measured under load. Here they only wait.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            child = subprocess.Popen(argv, cwd=ROOT, process_group=0, stdin=subprocess.DEVNULL)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        self.children[name] = child
        if self.stopping:
            self.pass_on(name, child, self.stopping[0], first=True)
        return child

    def check(self) -> None:
        """Raise Stop when asked to stop or when a child has ended by itself."""
        if self.stopping:
            raise Stop
        for child in self.children.values():
            if child.poll() is not None:
                raise Stop

    def nap(self, seconds: float) -> None:
        # time.sleep is carried on after a signal handler returns (PEP 475):
        # short naps keep the answer to Ctrl-C quick.
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check()
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        self.check()

    def llmgw_json(self, *args: str) -> tuple[Any, str]:
        """One `llmgw … --json` against our server: (its document, "") or (None, the sentence it said).

        The document is whatever JSON that command prints (Any): the step that asked knows its shape.
        """
        env = {**os.environ, "LLMGW_ADMIN": self.admin, "LLMGW_TOKEN_FILE": str(self.token_file)}
        try:
            # In a group of its own, like the servers: Ctrl-C is ours to pass on.
            done = subprocess.run([self.llmgw, *args, "--json"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=60, process_group=0)
        except subprocess.TimeoutExpired:
            return None, f"`llmgw {' '.join(args[:3])}` did not answer in 60 s"
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
            return None, said.removeprefix("llmgw: ")
        try:
            return json.loads(done.stdout), ""
        except ValueError:
            return None, f"`llmgw {' '.join(args[:3])}` printed no JSON"

    # -- the steps

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        try:
            try:
                self.init()
                self.start_server()
                self.start_agent()
                self.add_models()
                # Stopped, being removed, or on demand with no replica until asked: nothing to wait for.
                idle = ("stopped", "removing", "on demand")
                self.watching = {m["name"]: ("", "", 0.0) for m in self.catalog() if m.get("state") not in idle}
                while True:
                    if self.watching:
                        self.watch()
                    self.nap(WATCH_EVERY_S if self.watching else 0.5)
            except Stop:
                pass
            return self.finish()
        except BaseException:
            # build.py itself is going (an error of its own): never leave the
            # children, in process groups the terminal does not signal, behind.
            for child in self.children.values():
                if child.poll() is None:
                    os.kill(child.pid, signal.SIGTERM)
            for child in self.children.values():
                child.wait()
            raise

    def init(self) -> None:
        if self.dir.exists():
            # The lock first: on this directory, "another run is already running" says more than its ports.
            self.lock_run()
        self.refuse_taken_ports()
        if not self.dir.exists():
            say(f"making {self.named}/ for the server's and the node's data")
            self.dir.mkdir(parents=True)
            self.lock_run()
        self.where = ["--data-dir", self.named, "--store", f"sqlite:{self.named}/llmgw.db"]
        say("llmgw server init " + " ".join(self.where))
        # Its output kept, and shown once the server is up (start_server); the
        # API key in it, printed this once, goes into the lines to try at the end.
        init = subprocess.Popen([self.llmgw, "server", "init", *self.where, *self.init_args(),
                                 "--keep-password", f"{self.named}/first-admin"], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True, process_group=0)
        assert init.stdout is not None  # stdout=PIPE: typeshed types every Popen stream Optional
        for line in init.stdout:
            self.init_said.append(line.rstrip("\n"))
            if line.strip().startswith("API key"):
                self.api_key = line.split()[2]
        rc = init.wait()
        self.check()
        if rc != 0:
            for line in self.init_said:
                show(line)
            fail(f"`llmgw server init` failed (exit {exit_status(rc)}); see above", exit_status(rc) or 1)

    def refuse_taken_ports(self) -> None:
        """Exit saying which ports are taken, before anything is set up, when another program listens on one."""
        taken = taken_listeners(self.listen)
        if not taken:
            return
        names = {"client": "the client API", "agent": "the agents' port", "admin": "the admin API",
                 "metrics": "the metrics"}
        said = ", ".join(f"{address} ({names[role]})" for role, address in taken.items())
        flags = " ".join(f"--listen-{role} 127.0.0.1:{free_port_after(int(address.rpartition(':')[2]))}"
                         for role, address in taken.items())
        fail(f"{said} already {'has' if len(taken) == 1 else 'have'} a program listening: another "
             f"`build.py run`'s server perhaps. Nothing was set up and no password or key was made. Stop that "
             f"one (Ctrl-C where it runs), or give this run free ports: python3 build.py run {flags}")

    def lock_run(self) -> None:
        """Refuse, before anything is started or written, when another run holds this directory."""
        holder = self.run_lock.take(f"{self.client_url}/v1")
        if holder is None:
            return
        pid = holder.get("pid")
        who = f"pid {pid}" if isinstance(pid, int) and pid_alive(pid) else "its pid not yet written"
        url = holder.get("url") or "its URL not yet written"
        fail(f"another `build.py run` is already running on {self.named} ({who}, client API {url}); "
             f"use that one, or stop it (Ctrl-C where it runs) and run again. "
             f"A second, separate one needs its own directory and ports: "
             f"{RUN_DIR_ENV}=/tmp/llmgw-2 python3 build.py run --listen-client 127.0.0.1:8081 …")

    def init_args(self) -> list[str]:
        """The server's flags init also takes (its listeners and config), so that it prints the right URL."""
        out, i = [], 0
        while i < len(self.server_args):
            arg = self.server_args[i]
            flag = arg.split("=", 1)[0]
            if flag.startswith("--listen-") or flag == "--config":
                out.append(arg)
                if "=" not in arg and i + 1 < len(self.server_args):
                    out.append(self.server_args[i + 1])
                    i += 1
            i += 1
        return out

    def start_server(self) -> None:
        say("llmgw server " + " ".join(self.where + self.server_args) + "   (Ctrl-C stops it and the node)")
        server = self.start("server", [self.llmgw, "server", *self.where, *self.server_args])
        port = int(self.client_url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        # Ours once our server's process group holds the port: another
        # server already on it answers /health too, and ours then exits
        # saying the port is taken (check() in nap() sees that).
        while not (self.answers("/health") and group_holds_listener(server.pid, port)):
            if time.monotonic() > deadline:
                self.give_up(f"the server did not answer {self.client_url}/health in 60 s")
            self.nap(0.2)
        say(f"the control plane is up (pid {server.pid}): client API {self.client_url}/v1")
        for line in self.init_said:
            show(line)
        self.init_said = []
        say(self.portal_line())

    def answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.client_url + path, timeout=2) as r:  # noqa: S310 - http://, built here
                return r.status == 200
        except (OSError, ValueError):
            return False

    def start_agent(self) -> None:
        data, config = self.node_dir / "data", self.node_dir / "agent.yaml"
        agent_port = dial(self.listen["agent"])
        if not (data / "node.crt").exists():
            say(f"joining this machine to it as node {NODE_NAME!r} ({self.named}/node)")
            made, said = self.llmgw_json("node", "add", "--name", NODE_NAME, "--ttl", "10m",
                                         "--control-plane", agent_port)
            self.check()
            if made is None:
                self.give_up(f"`llmgw node add` refused: {said}")
            done, said = self.llmgw_json("join", made["code"], "--data-dir", str(data), "--config", str(config))
            self.check()
            if done is None:
                self.give_up(f"`llmgw join` failed: {said}")
        # Written at every start, JSON being YAML: the agent port may differ
        # from the last run's, and the rest is this checkout's choice.
        doc = {
            "name": NODE_NAME,
            "control_planes": [agent_port],
            "data_dir": str(data),
            "cache_dir": str(self.node_dir / "cache"),
            # Engines listen on loopback: only this machine's control plane reaches them.
            "advertise": "127.0.0.1",
            # Engines run as whoever runs build.py, even root: no system user
            # is made on a developer's machine, and the engines can read the
            # weights and the llama.cpp install under this checkout.
            "engines": {"user": ""},
        }
        if os.environ.get("HF_ENDPOINT"):
            doc["weights"] = {"hf_endpoint": os.environ["HF_ENDPOINT"]}
        config.write_text("# Written by `python3 build.py run` at each start; keys: docs/reference.md\n"
                          + json.dumps(doc, indent=2) + "\n")
        say(f"llmgw agent --config {self.named}/node/agent.yaml --stop-engines")
        self.agent_started = time.time()
        agent = self.start("agent", [self.llmgw, "agent", "--config", str(config), "--stop-engines"])
        say(f"the agent started (pid {agent.pid}); engines and weights go under {self.named}/node")

    def give_up(self, why: str) -> None:
        """Stop what was started, and exit 1 saying why."""
        say(why)
        self.failed = why
        self.on_signal(signal.SIGTERM, None)
        raise Stop

    def catalog(self) -> list[dict]:
        models, said = self.llmgw_json("ctl", "models")
        self.check()
        if models is None:
            say(f"could not list the models: {said}")
            return []
        return models

    def add_models(self) -> None:
        have = {m["name"]: m for m in self.catalog()}
        for m in self.models:
            there = have.get(m["name"])
            if there is not None:
                if m["source"] and there.get("source") != m["source"]:
                    say(f"{m['name']}: the catalog already has a model of this name, from {there.get('source')}; "
                        f"that one is served (to serve {m['source']} under this name: "
                        f".venv/bin/llmgw ctl model remove {m['name']}, then run again)")
                elif there.get("state") == "stopped":
                    say(f"{m['name']}: in the catalog, stopped (`llmgw ctl model start {m['name']}` runs it)")
                else:
                    say(f"{m['name']}: in the catalog ({m['what']})")
                continue
            argv = ["ctl", "model", "serve", m["source"] or "sim", "--engine", m["engine"], "--name", m["name"]]
            if m["cores"]:
                argv += ["--cores", str(m["cores"])]
            if m["memory"]:
                argv += ["--memory", m["memory"]]
            added, said = self.llmgw_json(*argv)
            self.check()
            if added is None:
                say(f"{m['name']}: not added to the catalog: {said}")
                continue
            spec = (added.get("model") or {}).get("spec") or {}
            profile = (spec.get("profiles") or [{}])[0]
            cores = profile.get("cpu_cores") or 0
            keeps = f"{cores or 'no'} core{'' if cores == 1 else 's'} and {profile.get('memory', '?')} kept"
            say(f"{m['name']}: added to the catalog ({m['what']}; {keeps})")
            for note in added.get("notes") or []:
                say(f"  {note}")

    def watch(self) -> None:
        """Say how each model's replica comes up, until every one has a ready one."""
        if time.monotonic() < self.next_watch:
            return
        self.next_watch = time.monotonic() + WATCH_EVERY_S
        replicas, _ = self.llmgw_json("ctl", "replicas", "--all")
        self.check()
        if replicas is None:
            return
        for name, (was, said, at) in list(self.watching.items()):
            # The store still holds the last run's replicas as they were when
            # it stopped ("ready"), until this run's agent says it runs none.
            mine = [r for r in replicas if r.get("model") == name and (r.get("since") or 0) >= self.agent_started]
            state, line = replica_state(mine)
            now = time.monotonic()
            if state == "ready":
                del self.watching[name]
                say(f"{name}: {line}")
                self.ready(name)
            # Progress (a download's percent) is said every 10 s at most; a new state at once.
            elif state != was or (line != said and now - at >= 10):
                say(f"{name}: {line}")
                self.watching[name] = (state, line, now)
            elif state == "waiting" and now - at >= 30 and name not in self.hinted:
                self.hinted.add(name)
                say(f"{name}: still no replica; `llmgw ctl explain-placement {name}` says why")
        if not self.watching:
            say("every model is ready; Ctrl-C stops the control plane, the node and its engines")

    def portal_line(self) -> str:
        known = read_first_admin(self.first_admin_file)
        if known is None:
            return (f"portal: {self.client_url}/  (a password for admin@localhost: "
                    f".venv/bin/llmgw people reset-password admin@localhost)")
        email, password = known
        return (f"portal: {self.client_url}/  sign in as {email}, password {password}  "
                f"(as init made it; kept in {self.named}/first-admin)")

    def ready(self, name: str) -> None:
        if not self.first_ready:
            say(f"  ask for it by name: \"model\": \"{name}\"")
            return
        self.first_ready = False
        base = f"{self.client_url}/v1"
        # Double quotes for the variable, so that the shell fills it in.
        bearer = (f"'Authorization: Bearer {self.api_key}'" if self.api_key
                  else '"Authorization: Bearer $OPENAI_API_KEY"')
        say("try it:")
        show(f"  curl -s {base}/chat/completions -H {bearer} \\")
        show("    -H 'Content-Type: application/json' \\")
        show(f"    -d '{{\"model\": \"{name}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'")
        given_key = f", api_key='{self.api_key}'" if self.api_key else ""
        show(f"  .venv/bin/python -c \"import openai; print(openai.OpenAI(base_url='{base}'{given_key})"
             f".chat.completions.create(model='{name}', messages=[{{'role': 'user', 'content': 'Hello'}}])"
             f".choices[0].message.content)\"")
        if not self.api_key:
            say(f"  with the API key printed when {self.named} was set up in OPENAI_API_KEY; a new one: "
                ".venv/bin/llmgw keys create NAME --project Default/default/default")

    # -- stopping

    def finish(self) -> int:
        status = 1
        if not self.stopping:
            # A child ended by itself: the other is stopped, and build.py
            # exits with the status of the one that ended.
            name, child = next((n, c) for n, c in self.children.items() if c.returncode is not None)
            status = exit_status(child.returncode) or 1
            self.failed = f"the {name} exited with status {exit_status(child.returncode)}; see above"
            say(self.failed)
            if name == "agent":
                say(f"  (a node whose cluster was set up again since it joined is refused: "
                    f"rm -rf {self.named}/node to join afresh)")
            self.on_signal(signal.SIGTERM, None)
        results = {}
        for name, child in self.children.items():  # the server, then the agent
            if name not in self.signalled and child.poll() is None:
                self.pass_on(name, child, self.stopping[0], first=True)
            try:
                results[name] = child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                say(f"the {name} did not stop in {STOP_GRACE_S} s; killing it (pid {child.pid})")
                child.kill()
                results[name] = child.wait()
        self.stop_left_engines()
        if self.init_said and self.api_key:
            # init set the store up, but its server never answered: its key is not shown for a server that is not
            # there, and was kept nowhere; the password is in first-admin for the run that does start.
            say(f"the server never came up, so the key init made is not shown; once a run is up, make one: "
                f".venv/bin/llmgw keys create NAME --project Default/default/default. The administrator's "
                f"password is kept in {self.named}/first-admin")
        if self.failed:
            # Why was said when it happened, above.
            fail("stopped everything it started" if self.children else "stopped", status)
        # Ended by the signal we passed on, or exiting 0 or 128+N for it, is
        # the stop that was asked for.
        clean = {signal.SIGINT, signal.SIGTERM}
        for name, rc in results.items():
            if not (rc == 0 or -rc in clean or rc - 128 in clean):
                fail(f"the {name} did not stop cleanly (exit {exit_status(rc)})", exit_status(rc))
        say("stopped " + " and ".join(f"the {name}" for name in results) if results else "stopped")
        return 0

    def stop_left_engines(self) -> None:
        """Stop engines an agent that did not stop cleanly left running, by its records (PID and start time)."""
        hz = os.sysconf("SC_CLK_TCK")
        left = []
        for record in (self.node_dir / "data").glob("engines-run/shards/*/record.json"):
            try:
                r = json.loads(record.read_text())
                with open(f"/proc/{r['pid']}/stat", "rb") as f:
                    stat = f.read()
                started = int(stat[stat.rfind(b")") + 2:].split()[19]) / hz
            except (OSError, ValueError, KeyError, IndexError):
                continue
            # A PID reused since is another process: only the one that started then is the engine.
            if abs(started - float(r.get("boot_start") or -1)) < 1.5 / hz:
                left.append(r)
        for r in left:
            say(f"stopping engine {r.get('shard_id')} (pid {r['pid']}), which the agent left running")
            try:
                os.killpg(r["pgid"], signal.SIGKILL)
            except OSError:
                pass


# --- check ---------------------------------------------------------------------


# Run by .venv's python: of the imports from one package of llmgw into
# another, how many name a module inside it rather than its face (the
# package itself, whose __init__ says what it offers). A single-module
# package (llmgw/errors.py) is all face and is not counted. grimp is
# import-linter's own graph, so the figure counts what the contracts see.
# It fails (exit 1) when the figure is over the most allowed, its argument.
FACES_SCRIPT = """
import sys
import grimp
most = int(sys.argv[1])
graph = grimp.build_graph("llmgw")
def package(module):
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module
crossing = inner = 0
reached = {}
for importer in graph.modules:
    for imported in graph.find_modules_directly_imported_by(importer):
        target = package(imported)
        if target == package(importer) or not graph.find_children(target):
            continue
        lines = len(graph.get_import_details(importer=importer, imported=imported)) or 1
        crossing += lines
        if imported != target:
            inner += lines
            reached[target] = reached.get(target, 0) + lines
worst = ", ".join(f"{p.split('.')[1]} {n}" for p, n in sorted(reached.items(), key=lambda kv: -kv[1])[:5])
print(f"{inner} of {crossing} imports that cross into another package reach past its face (most: {worst}); "
      f"at most {most} may")
if inner > most:
    print(f"{inner - most} more than build.py's FACES_MOST allows: import the name from the package "
          f"(from llmgw.control import AdminClient), adding it to the package's __init__ if it is not there yet; "
          f"docs/internals.md, Faces")
    sys.exit(1)
if inner < most:
    print(f"fewer than FACES_MOST: lower it to {inner} in build.py, so that the figure cannot grow back")
"""
# The most imports that may reach past a package's face: the figure when it was last lowered (issue 26 took it
# from 294 to 31). `build.py check` fails above it; lower it whenever the figure falls, never raise it.
FACES_MOST = 31


class Step:
    """One check: a name, what it holds, and how it runs.

    `informational` steps print a figure and never fail the check: a
    measure to watch fall, not yet a rule.
    """

    def __init__(self, name: str, holds: str, argv: list[str], informational: bool = False):
        self.name, self.holds, self.argv, self.informational = name, holds, argv, informational


def check_steps() -> list[Step]:
    """What `build.py check` runs, in order; a new checker is one more Step here."""
    return [
        # ruff reads ruff.toml, mypy the [mypy] sections of setup.cfg: the
        # configuration lives with the code, so an editor's run agrees with CI's.
        Step("lint", "ruff's findings over the checkout (ruff.toml)",
             [str(VENV / "bin" / "ruff"), "check", "."]),
        Step("types", "mypy over llmgw/, strict on the request path and the floors ([mypy] in setup.cfg)",
             [str(VENV / "bin" / "mypy")]),
        Step("layers", "no package imports a floor above its own (.importlinter, docs/internals.md)",
             [str(VENV / "bin" / "lint-imports"), "--no-logo", "--no-cache", str(ROOT / ".importlinter")]),
        Step("faces", f"at most {FACES_MOST} imports reach past a package's face (docs/internals.md, Faces)",
             [str(VENV_PYTHON), "-c", FACES_SCRIPT, str(FACES_MOST)]),
    ]


# A subject longer than this is cut in `git log --oneline` and in most tools' one-line views; the why goes in
# the body (issue 26, Habits).
SUBJECT_MAX = 72


def unpushed_range() -> str | None:
    """The commits not yet on the upstream branch, as a `git log` range: `@{upstream}..HEAD` where the branch
    tracks one, else `origin/main..HEAD` where that exists, else None (outside a git checkout too)."""
    def git_ok(*argv: str) -> bool:
        try:
            return subprocess.run(["git", *argv], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0
        except OSError:  # no git on this machine
            return False
    if git_ok("rev-parse", "--verify", "--quiet", "@{upstream}"):
        return "@{upstream}..HEAD"
    if git_ok("rev-parse", "--verify", "--quiet", "origin/main^{commit}"):
        return "origin/main..HEAD"
    return None


def long_subjects() -> tuple[str | None, list[tuple[str, str]]]:
    """The range looked at, and the (short hash, subject) of each commit in it whose subject is over SUBJECT_MAX."""
    where = unpushed_range()
    if where is None:
        return None, []
    done = subprocess.run(["git", "log", "--format=%h%x00%s", where], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if done.returncode != 0:
        return where, []
    pairs = [line.split("\0", 1) for line in done.stdout.splitlines() if "\0" in line]
    return where, [(sha, subject) for sha, subject in pairs if len(subject) > SUBJECT_MAX]


def warn_long_subjects() -> None:
    """Warn, never fail, on each commit not yet pushed whose subject is over SUBJECT_MAX characters: it can
    still be reworded (`git rebase -i`) before it is shared."""
    where, found = long_subjects()
    if where is None:
        return
    for sha, subject in found:
        say(f"subjects: warning: {sha}'s subject is {len(subject)} characters, over {SUBJECT_MAX}: {subject}")
    if found:
        say(f"subjects: say what changed in {SUBJECT_MAX} characters or fewer and put the why in the body; "
            f"`git rebase -i` rewords a commit not yet pushed ({where})")


def cmd_check(args: list[str]) -> int:
    if args:
        fail(f"check takes no arguments (got {' '.join(args)}); it runs every check: "
             + ", ".join(step.name for step in check_steps()), 2)
    ensure_venv(CHECK_EXTRAS)
    failed = []
    for step in check_steps():
        say(f"{step.name}: {step.holds}")
        started = time.monotonic()
        rc = subprocess.run(step.argv, cwd=ROOT, stdin=subprocess.DEVNULL).returncode
        took = time.monotonic() - started
        if rc == 0:
            say(f"{step.name}: {'measured' if step.informational else 'passed'} ({took:.1f} s)")
        elif step.informational:
            say(f"{step.name}: could not be measured (exit {exit_status(rc)}, {took:.1f} s); not a failure")
        else:
            say(f"{step.name}: FAILED (exit {exit_status(rc)}, {took:.1f} s); see above")
            failed.append(step.name)
    warn_long_subjects()
    if failed:
        say(f"check failed: {', '.join(failed)}")
        return 1
    say("check passed")
    return 0


# --- locales -------------------------------------------------------------------


def compile_locales() -> None:
    """The portal's catalogues, compiled from locales/ into llmgw/portal/locales/ (not kept in git)."""
    rc = subprocess.run([str(VENV_PYTHON), "-m", "llmgw.portal.catalogues", "compile"], cwd=ROOT,
                        stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        fail(f"compiling the portal's catalogues failed (exit {exit_status(rc)}); see above")


def cmd_locales(args: list[str]) -> int:
    if args:
        fail(f"locales takes no arguments (got {' '.join(args)})", 2)
    ensure_venv()
    rc = subprocess.run([str(VENV_PYTHON), "-m", "llmgw.portal.catalogues", "extract"], cwd=ROOT,
                        stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        fail(f"extracting the sentences failed (exit {exit_status(rc)}); see above")
    compile_locales()
    missing = subprocess.run([str(VENV_PYTHON), "-m", "llmgw.portal.catalogues", "missing"], cwd=ROOT,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL).returncode
    if missing != 0:
        say("some sentences have no translation yet (listed above); see docs/building.md, Languages")
        return 1
    say("every sentence has its translations")
    return 0


# --- test ----------------------------------------------------------------------

# What the tests run for real beside Python: Debian's package, how to see it
# is there (a program on PATH, a file, a glob, a module of Debian's own
# python3, the venv module of this python), and which tests want it. The
# same packages .ci/run installed before build.py did (issue 26): a fresh
# clone without them had 59 failures and 72 errors.
DEBIAN_PACKAGES = (
    # The store's tests on PostgreSQL start throwaway clusters of their own (tests/support/pgcluster.py).
    ("postgresql", "glob", "/usr/lib/postgresql/*/bin/initdb"),
    # The store's failover (tests/support/storemachines.py): etcd and PostgreSQL under Patroni, which
    # reads etcd through python3-etcd, run by Debian's own python3.
    ("patroni", "program", "patroni"),
    ("etcd-server", "program", "etcd"),
    ("python3-etcd", "python3", "etcd"),
    # The floating address's configuration is checked by `keepalived -t`, whose check runs curl.
    ("keepalived", "program", "keepalived"),
    ("curl", "program", "curl"),
    # The SSH installs log in to an sshd of their own (as a user who is not root: sudo); the firewall's
    # rules are checked with `nft -c`; the setup screens and the console are driven in tmux.
    ("openssh-server", "file", "/usr/sbin/sshd"),
    ("openssh-client", "program", "ssh-keygen"),
    ("nftables", "program", "nft"),
    ("tmux", "program", "tmux"),
    ("sudo", "program", "sudo"),
    # The browser tests drive Debian's headless Chromium (never a browser playwright fetches): the shell
    # costs a third of the full browser's CPU (tests/support/browser.py). DejaVu has the Turkish letters.
    ("chromium-headless-shell", "program", "chromium-headless-shell"),
    ("fonts-dejavu-core", "file", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    # The portal's JavaScript is checked by node; the OpenID provider and the coding agents are npm's.
    ("nodejs", "program", "node"),
    ("npm", "program", "npm"),
    # VS Code (code-server) for llmgw's extension: its native modules built from source, and the ripgrep its
    # search runs (tests/support/codeserver.py).
    ("g++", "program", "g++"),
    ("make", "program", "make"),
    ("ripgrep", "program", "rg"),
    # The directory sign-in tests start a slapd of their own and load it with ldapadd.
    ("slapd", "file", "/usr/sbin/slapd"),
    ("ldap-utils", "program", "ldapadd"),
    # The shipped alerting rules and Alertmanager example are checked by promtool and amtool.
    ("prometheus", "program", "promtool"),
    ("prometheus-alertmanager", "program", "amtool"),
    # The shipped proxy configurations are tested with Debian's nginx and Caddy in front of two control planes.
    ("nginx-light", "file", "/usr/sbin/nginx"),
    ("caddy", "program", "caddy"),
    # build.py makes .venv with the venv module, which Debian ships apart.
    ("python3-venv", "venv", ""),
)

# Debian's way of telling a package's scripts not to start its service (exit 101), as in container
# images: slapd, etcd, sshd and keepalived would otherwise hold ports the tests' own ones may want.
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# Read by postgresql-common before it makes a "main" cluster: the tests start clusters of their own.
CREATECLUSTER_CONF = Path("/etc/postgresql-common/createcluster.conf")

# The npm folders the tests run programs from, each installed from its lock file.
NPM_FOLDERS = (ROOT / "tests" / "support" / "oidc", ROOT / "tests" / "support" / "editors",
               ROOT / "tests" / "support" / "vscode")


def present_here(kind: str, what: str) -> bool:
    """Whether this machine has what DEBIAN_PACKAGES's (kind, what) names."""
    if kind == "program":
        return shutil.which(what) is not None
    if kind == "file":
        return os.path.exists(what)
    if kind == "glob":
        return bool(list(Path("/").glob(what.lstrip("/"))))
    if kind == "python3":
        try:
            return subprocess.run(["/usr/bin/python3", "-c", f"import {what}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    if kind == "venv":
        # A working .venv needs no venv module; making one does.
        if venv_python_works():
            return True
        try:
            import ensurepip  # noqa: F401
            import venv  # noqa: F401
        except ImportError:
            return False
        return True
    raise ValueError(f"unknown kind {kind!r}")


def missing_packages(present) -> list[str]:
    """Debian's packages the tests need that `present(kind, what)` says are not here, in DEBIAN_PACKAGES's order."""
    return [package for package, kind, what in DEBIAN_PACKAGES if not present(kind, what)]


def apt_line(missing: list[str]) -> str:
    """The one command that installs `missing`, as a person who is not root types it."""
    return "sudo apt-get install --no-install-recommends " + " ".join(missing)


def install_packages(missing: list[str]) -> None:
    """apt-get install `missing`, as root, starting no service and making no PostgreSQL cluster."""
    if shutil.which("apt-get") is None:
        fail(f"the tests need Debian's {', '.join(missing)}, and there is no apt-get here to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "UCF_FORCE_CONFFOLD": "1"}
    if "postgresql" in missing and not CREATECLUSTER_CONF.exists():
        # UCF_FORCE_CONFFOLD keeps this file when the package brings its own.
        CREATECLUSTER_CONF.parent.mkdir(parents=True, exist_ok=True)
        CREATECLUSTER_CONF.write_text("create_main_cluster = off\n")
    made_policy = not POLICY_RC_D.exists()
    if made_policy:
        POLICY_RC_D.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
            say(" ".join(argv))
            rc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode
            if rc != 0:
                fail(f"{' '.join(argv[:2])} failed (exit {exit_status(rc)}); see above")
    finally:
        if made_policy:
            POLICY_RC_D.unlink(missing_ok=True)


def ensure_packages() -> None:
    """Debian's packages the tests need: installed when we are root, else the line to run, and exit 1."""
    missing = missing_packages(present_here)
    if not missing:
        return
    if os.geteuid() != 0:
        say(f"the tests need Debian packages this machine lacks: {', '.join(missing)}. Install them with:")
        print(f"  {apt_line(missing)}", flush=True)
        say("then run `python3 build.py test` again (run as root, it installs them itself, starting no service)")
        sys.exit(1)
    say(f"installing Debian's {' '.join(missing)} (their services not started)")
    install_packages(missing)
    still = missing_packages(present_here)
    if still:
        fail(f"installed {', '.join(missing)}, but {', '.join(still)} is still not there")


def npm_stale(folder: Path) -> bool:
    """Whether `folder`'s node_modules is missing, or older than its lock file."""
    lock = folder / "package-lock.json"
    # npm ci writes node_modules/.package-lock.json last, so its time is when the install finished.
    installed = folder / "node_modules" / ".package-lock.json"
    return not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime


def start_npm() -> list[tuple[Path, subprocess.Popen, Path]]:
    """`npm ci` begun in each of NPM_FOLDERS whose node_modules is missing or older than its lock file.

    They run while pip installs (finish_npm waits for them): on a fresh clone the two took 13 s, mostly
    waiting on the registry, which had been 13 s of the suite's 12 minutes. Their output is kept in a
    file each and shown when they end, so it does not break into pip's lines.
    """
    started = []
    for folder in NPM_FOLDERS:
        if not npm_stale(folder):
            continue
        log = TEST_REPORTS / f"npm-{folder.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as said:
            proc = subprocess.Popen(["npm", "ci", "--prefix", str(folder), "--no-audit", "--no-fund",
                                     "--loglevel=error"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=said,
                                    stderr=subprocess.STDOUT)
        started.append((folder, proc, log))
    return started


def finish_npm(started: list[tuple[Path, subprocess.Popen, Path]]) -> None:
    for folder, proc, log in started:
        rc = wait_through_interrupts(proc)
        said = log.read_text(errors="replace").strip()
        say(f"npm ci in {shown(folder)} (at the versions its package-lock.json pins): {said or 'done'}")
        if rc != 0:
            fail(f"npm ci in {shown(folder)} failed (exit {exit_status(rc)}); see above")


# Workers for the parallel phase: twice the cores, at most 8. The tests mostly wait on the servers,
# engines and databases they start, each a process of its own, so a core has work from two workers
# (measured on this project's 2-core machine, under others' load: docs/building.md, "The parallel
# suite"). Each worker holds a PostgreSQL cluster of its own, hence the cap.
TEST_WORKERS = min(8, 2 * (os.cpu_count() or 1))
# The test results of each phase, for the summary line.
TEST_REPORTS = BUILD / "tests"

TEST_USAGE = """\
usage: python3 build.py test [--quick] [--seed N] [--workers N]
       python3 build.py test PYTEST_ARGS...

With no arguments, or only these, every test: first those not marked serial on
several workers (pytest-xdist, a file to a worker), then those marked serial
one at a time; a line at the end sums up both.
  --quick      leave out the tests marked slow (browsers, directories, Patroni,
               three machines, upgrades, SSH installs, the zipapp, llama.cpp)
               and those measured at 1 s or more (tests/measured_slow.txt)
  --measure-slow  write tests/measured_slow.txt again from the last whole run's
               reports (build/tests/phase-*.xml), and run nothing
  --seed N     the random order of an earlier run (its seed is printed first)
  --workers N  workers for the parallel phase (default {workers})
Anything else is passed to pytest as it is, e.g. one file:
  python3 build.py test tests/integration/test_cluster.py -x
"""


MEASURED_SLOW = ROOT / "tests" / "measured_slow.txt"
SLOW_SECONDS = 1.0


def junit_node_ids(path: Path) -> list[tuple[float, str]]:
    """(seconds, pytest node id) of each test in pytest's JUnit XML report at `path`."""
    import xml.etree.ElementTree as ET

    found = []
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - pytest's own report of this run
        parts = (case.get("classname") or "").split(".")
        module = len(parts)
        while module and not parts[module - 1].startswith("test_"):
            module -= 1
        node = "::".join(["/".join(parts[:module]) + ".py", *parts[module:], case.get("name") or ""])
        found.append((float(case.get("time") or 0), node))
    return found


def measure_slow() -> int:
    """tests/measured_slow.txt from the last run's reports: every test that took SLOW_SECONDS or more, and
    the lines of those the run left out."""
    reports = sorted(TEST_REPORTS.glob("phase-*.xml"))
    if not reports:
        fail("there is no whole run's report in build/tests: run `python3 build.py test` first", 1)
    timed = [row for path in reports for row in junit_node_ids(path)]
    ran = {node for _, node in timed}
    header, kept = "#", set()
    if MEASURED_SLOW.exists():
        text = MEASURED_SLOW.read_text()
        # The header is the comment lines it starts with, a blank line after them or not (an edit by hand
        # had taken the blank line away, and the whole list was then kept as the header: 2026-12-07).
        header = "\n".join(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines())) or "#"
        # A test the reports do not time (left out by --quick, or by a run of one file) keeps its line.
        for line in text.splitlines():
            seconds, tab, node = line.partition("\t")
            if tab and not line.startswith("#") and node not in ran:
                kept.add((float(seconds), node))
    slow = sorted({(round(t, 1), node) for t, node in timed if t >= SLOW_SECONDS} | kept,
                  key=lambda row: (-row[0], row[1]))
    MEASURED_SLOW.write_text(header + "\n\n" + "".join(f"{t:.1f}\t{node}\n" for t, node in slow))
    say(f"{MEASURED_SLOW.name}: {len(slow)} tests of {SLOW_SECONDS:g} s or more, "
        f"from {', '.join(p.name for p in reports)}")
    return 0


def suite_options(args: list[str]) -> dict | None:
    """build.py's own options for the whole suite, or None when ARGS are pytest's."""
    options: dict = {"quick": False, "seed": None, "workers": TEST_WORKERS}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--quick":
            options["quick"] = True
            continue
        name, eq, value = arg.partition("=")
        if name in ("--seed", "--workers"):
            if not eq:
                if not rest:
                    fail(f"{name} takes a number", 2)
                value = rest.pop(0)
            if not value.isdigit() or (name == "--workers" and int(value) < 1):
                fail(f"{name} takes a number, got {value!r}", 2)
            options[name[2:]] = int(value)
            continue
        return None
    return options


def suite_phases(quick: bool, seed: int, workers: int, run: Path) -> list[tuple[str, list[str]]]:
    """The pytest arguments of each phase: the parallel one, then the serial one, each in a folder of RUN."""
    slow = " and not slow" if quick else ""
    order = ["-p", "randomly", f"--randomly-seed={seed}"]
    return [
        # --dist loadfile: a file to a worker, in the order tests/support/schedule.py gives (the longest modules
        # first, those that run llmgw.pyz once it is built): docs/building.md, "The parallel suite".
        (f"parallel ({workers} workers)", ["-n", str(workers), "--dist", "loadfile", "-m", f"not serial{slow}",
                                           *order, f"--basetemp={run / 'p'}"]),
        ("serial", ["-n", "0", "-m", f"serial{slow}", *order, f"--basetemp={run / 's'}", *serial_files()]),
    ]


def suite_folder(runs: Path | None = None) -> tuple[Path, int]:
    """A folder for this run's temporary files, locked while it runs, and earlier runs' folders sent away.

    pytest's own numbered folders are removed when a later pytest exits, beyond the newest three: the
    serial phase, ending last, paid for removing a whole earlier run's 6.6 GB and 167,000 files, 28 of its
    64 s (measured on the 2-core machine). So each run has a folder of its own here; the last finished one
    stays for a look after a failure, and older ones (not locked by a run still going) are removed by a
    process at the lowest CPU and disk priority, which the tests hardly feel.
    Short names: the tests put Unix sockets under it, whose paths may not pass 107 bytes.
    """
    runs = runs or Path(tempfile.gettempdir()) / f"llmgw-tests-{os.getuid()}"
    runs.mkdir(mode=0o700, exist_ok=True)
    finished = []
    for entry in runs.iterdir():
        if entry.name.startswith("trash-"):
            continue
        lock = os.open(entry / ".lock", os.O_RDONLY) if (entry / ".lock").exists() else None
        try:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a run still going, here or in another checkout
        finally:
            if lock is not None:
                os.close(lock)
        finished.append(entry)
    finished.sort(key=lambda entry: entry.stat().st_mtime)
    for entry in finished[:-1]:
        entry.rename(runs / f"trash-{entry.name}")
    if any(entry.name.startswith("trash-") for entry in runs.iterdir()):
        lowest = ["nice", "-n", "19"] + (["ionice", "-c", "3"] if shutil.which("ionice") else [])
        subprocess.Popen([*lowest, "sh", "-c", 'rm -rf -- "$0"/trash-*', str(runs)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    run = Path(tempfile.mkdtemp(prefix="", dir=runs))
    lock = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return run, lock


def serial_files() -> list[str]:
    """The test files that mark a test `serial`, which the serial phase collects alone.

    Collecting the whole suite to deselect all but three tests cost the serial phase 8-10 s of its 46.
    A file that says `mark.serial` without marking anything is collected and deselected, which is harmless.
    """
    tests = ROOT / "tests"
    found = sorted(str(path.relative_to(ROOT)) for path in tests.rglob("test_*.py")
                   if "node_modules" not in path.parts and "mark.serial" in path.read_text(errors="replace"))
    return found or ["tests"]


def junit_counts(path: Path) -> dict[str, int]:
    """passed, failed, errors and skipped from pytest's JUnit XML report at `path` (zeros without one)."""
    import xml.etree.ElementTree as ET

    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    try:
        root = ET.parse(path).getroot()  # noqa: S314 - the report pytest just wrote for this run
    except (OSError, ET.ParseError):
        return counts
    for suite in root.iter("testsuite"):
        tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        counts["failed"] += failures
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += tests - failures - errors - skipped
    return counts


def phase_line(name: str, counts: dict[str, int], seconds: float) -> str:
    said = ", ".join(f"{n} {'error' if what == 'errors' and n == 1 else what}" for what, n in counts.items()
                     if n or what == "passed")
    return f"{name}: {said} in {seconds:.0f} s"


def pytest_env() -> dict[str, str]:
    """The environment pytest and everything it starts run in: this one, less PYTHONDONTWRITEBYTECODE.

    The suite starts some 1,500 Python processes (servers, agents, engines, `llmgw` commands). Where the
    variable is set (as on this project's own machines), none of them keeps its bytecode, so each compiles
    every module it imports again, and every pytest worker rewrites every test module's asserts again:
    about 0.1 s of CPU a process and 15 s a worker, measured on the 2-core machine.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_pytest(args: list[str]) -> int:
    # The 25 slowest tests, setups and teardowns close each run, so a test that grew slow is seen where it
    # grew rather than only in the suite's total (--durations given here wins: pytest keeps the last).
    return wait_through_interrupts(subprocess.Popen([str(VENV_PYTHON), "-m", "pytest", "--durations=25", *args],
                                                    cwd=ROOT, env=pytest_env()))


def run_suite(quick: bool, seed: int, workers: int) -> int:
    """Both phases, and a line summing them up; the worst exit status of the two."""
    say(f"random order seed {seed}: `python3 build.py test{' --quick' if quick else ''} --seed {seed}` runs this "
        "order again")
    TEST_REPORTS.mkdir(parents=True, exist_ok=True)
    run, lock = suite_folder()
    lines, worst, started = [], 0, time.monotonic()
    total = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for index, (name, args) in enumerate(suite_phases(quick, seed, workers, run)):
        report = TEST_REPORTS / f"phase-{index + 1}.xml"
        report.unlink(missing_ok=True)
        say(f"{name} phase: python -m pytest {' '.join(args)}")
        phase_started = time.monotonic()
        rc = exit_status(run_pytest([*args, f"--junitxml={report}"]))
        counts = junit_counts(report)
        lines.append(phase_line(name, counts, time.monotonic() - phase_started))
        total = {k: total[k] + counts[k] for k in total}
        # 5 is pytest's "no tests collected": a quick run may have no serial test left.
        if rc not in (0, 5):
            worst = max(worst, rc)
    lines.append(phase_line("all", total, time.monotonic() - started))
    os.close(lock)
    say("; ".join(lines) + f" (seed {seed})")
    if worst:
        say(f"tests failed (pytest exit {worst}); the seed above replays the order, and the tests' files "
            f"are in {run} until the run after next")
    elif sum(total.values()) == 0:
        fail("pytest collected no tests, which counts as a failure", 5)
    return worst


def cmd_test(args: list[str]) -> int:
    if args and args[0] in ("-h", "--help"):
        print(TEST_USAGE.format(workers=TEST_WORKERS), end="")
        return 0
    if args == ["--measure-slow"]:
        return measure_slow()
    options = suite_options(args)
    began = time.monotonic()
    if options is not None:
        # The whole suite: what it runs on must be here before anything runs.
        ensure_packages()
    npm = start_npm() if options is not None else []
    ensure_venv(TEST_EXTRAS)
    compile_locales()
    # playwright drives Debian's chromium; nothing may fetch a browser of its own.
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    if options is not None:
        finish_npm(npm)
        # Compiled once here, in parallel, rather than by the first dozen processes at once.
        subprocess.run([str(VENV_PYTHON), "-m", "compileall", "-q", "-j", "0", "llmgw"], cwd=ROOT,
                       env=pytest_env(), stdout=subprocess.DEVNULL, check=False)
        seed = options["seed"] if options["seed"] is not None else int.from_bytes(os.urandom(4), "big")
        ready = time.monotonic()
        rc = run_suite(options["quick"], seed, options["workers"])
        # The figure the suite's goal is about (issue 26): the installs and checks before the tests count too.
        say(f"test took {time.monotonic() - began:.0f} s in all, {ready - began:.0f} s of it making sure of "
            "the packages, the virtual environment and npm's")
        return rc
    say("python -m pytest " + " ".join(args))
    rc = run_pytest(args)
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


def bench_limit(path: Path) -> int:
    """BENCH_LIMIT_S, or the bench's own `LIMIT_S = N` line where what it measures needs longer
    (bench_portal seeds a million usage rows on each dialect: the issue's size)."""
    found = re.search(r"^LIMIT_S = (\d+)\b", path.read_text(), re.M)
    return int(found.group(1)) if found else BENCH_LIMIT_S


def run_bench(path: Path) -> int:
    """Run one bench in a process group of its own, bounded in time.

    The group is what lets a stuck bench be stopped together with the
    servers and engines it started, rather than leaving them on the ports
    the next bench wants.
    """
    limit = bench_limit(path)
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
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            say(f"{path.name} ran past {limit} s; stopping it and what it started")
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

# The CPython versions one archive carries unless `dist --python X.Y` says
# otherwise: those a node is likely to have (Debian 12 ships 3.11, Ubuntu
# 24.04 3.12, Fedora 41 3.13), so one file runs on each.
DIST_PYTHONS = ("3.11", "3.12", "3.13")


def install_requires() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    raw = cfg.get("options", "install_requires", fallback="")
    return [line.strip() for line in raw.splitlines() if line.strip() and not line.strip().startswith("#")]


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def dist_pythons(args: list[str]) -> list[str]:
    """The versions named by `--python X.Y` (repeatable), or DIST_PYTHONS."""
    versions: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--python" and rest:
            value = rest.pop(0)
        elif arg.startswith("--python="):
            value = arg.split("=", 1)[1]
        else:
            fail(f"dist takes only --python X.Y, repeatable (got {arg!r}); e.g. "
                 f"`python3 build.py dist --python 3.12`", 2)
        match = re.fullmatch(r"3\.(\d+)", value)
        if not match or int(match.group(1)) < 11:
            fail(f"dist --python wants a CPython version 3.11 or newer, like 3.12 (got {value!r})", 2)
        if value not in versions:
            versions.append(value)
    return sorted(versions or DIST_PYTHONS, key=lambda v: int(v.split(".")[1]))


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


def this_platform() -> dict:
    """What the archive is built for, and the wheel platform tags that fit it.

    Asked of .venv's python, whose pip chooses the wheels. Tags are this
    machine's manylinux ones (newest first), not `linux_x86_64`: a wheel
    tagged that was built on one machine for that machine alone.
    """
    probe = subprocess.run(
        [str(VENV_PYTHON), "-c",
         "import json, platform, sys\n"
         "from pip._vendor.packaging.tags import platform_tags\n"
         "print(json.dumps({'implementation': sys.implementation.name, 'machine': platform.machine(),"
         " 'system': platform.system(), 'tags': [t for t in platform_tags() if not t.startswith('linux_')]}))"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(probe.stdout)


# Run by .venv's python over a target folder: the requirements of what is
# installed there, their markers evaluated for the target version, that
# nothing there satisfies. Standard library and pip's own vendored packaging.
MISSING_FOR_VERSION = """
import json, pathlib, sys
from email.parser import Parser
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
target, version = pathlib.Path(sys.argv[1]), sys.argv[2]
env = {"python_version": version, "python_full_version": version + ".0"}
metas = [Parser().parsestr(p.read_text()) for p in target.glob("*.dist-info/METADATA")]
have = {canonicalize_name(m["Name"]) for m in metas}
missing = set()
for meta in metas:
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(dict(env, extra="")):
            continue
        if canonicalize_name(req.name) not in have:
            missing.add(str(req).split(";")[0].strip())
print(json.dumps(sorted(missing)))
"""


def installed_for(version: str, target: Path, tags: list[str], requirements: Path, constraints: Path,
                  cache: Path | None) -> Path:
    """Where the dependencies' wheels for CPython VERSION lie installed: `target`, where install_for put them,
    or the folder in `cache` holding what it installed before for the same pins, version and platform.

    The dependencies' wheels for a version are the same files for as long as setup.cfg and .venv's pins
    are: 13 s of pip a version alone, 22-27 s beside the suite, every `dist`, and twice per version in the
    suite (its own archive for the running Python, then the three versions'). The archive only reads them,
    so the kept folder is read where it lies: copying its 817 MB for three versions took 29 s of the
    kernel's time (2026-12-07).
    """
    if cache is None:
        install_for(version, target, tags, requirements, constraints)
        return target
    key = hashlib.sha256("\0".join([version, *tags, requirements.read_text(), constraints.read_text()]).encode())
    kept = cache / f"cp{version.replace('.', '')}-{key.hexdigest()[:16]}"
    if not kept.is_dir():
        install_for(version, target, tags, requirements, constraints)
        cache.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=cache))
        shutil.copytree(target, partial / "lib", symlinks=True)
        try:
            os.replace(partial / "lib", kept)
        except OSError:
            pass  # another build kept the same set meanwhile
        shutil.rmtree(partial, ignore_errors=True)
        return target
    os.utime(kept)  # in use: a cache pruned by age (the suite's, tests/support/pyz.py) keeps it
    say(f"CPython {version}: the wheels installed by an earlier build for the same pins, in {shown(kept)}")
    return kept


def install_for(version: str, target: Path, tags: list[str], requirements: Path, constraints: Path) -> None:
    """pip install the dependencies' wheels for CPython VERSION into target, whatever runs pip.

    pip takes the wheels for --python-version but evaluates the dependencies'
    markers for the interpreter running it: built from 3.11, the 3.13 set
    had typing_extensions, which says `python_version < "3.13"`. Extra is
    harmless; missing is not (built from 3.13, the 3.11 set would lack it).
    So what the markers ask for on VERSION and is not there is added, and
    pip run again, until nothing is missing.
    """
    abi = "cp" + version.replace(".", "")
    platform_args = [arg for tag in tags for arg in ("--platform", tag)]
    started = time.monotonic()
    wanted = requirements.read_text().splitlines()
    for _ in range(4):
        if target.exists():
            shutil.rmtree(target)
        listed = requirements.with_name(f"requirements-{abi}.txt")
        listed.write_text("\n".join(wanted) + "\n")
        result = subprocess.run(
            [str(VENV_PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
             "--no-compile", "--only-binary=:all:", "--target", str(target),
             "--python-version", version, "--implementation", "cp", "--abi", abi, *platform_args,
             "-r", str(listed), "-c", str(constraints)],
            cwd=ROOT,
        )
        if result.returncode != 0:
            fail(f"pip could not install the dependencies' wheels for CPython {version} (exit "
                 f"{result.returncode}); see above. Leave that version out with `python3 build.py dist "
                 f"--python X.Y` for each version wanted.")
        probe = subprocess.run([str(VENV_PYTHON), "-c", MISSING_FOR_VERSION, str(target), version],
                               capture_output=True, text=True, check=True)
        missing = json.loads(probe.stdout)
        if not missing:
            break
        say(f"CPython {version} also needs {', '.join(missing)}, which pip left out; installing again")
        wanted += missing
    else:
        fail(f"the wheels for CPython {version} still lack {', '.join(missing)} after four tries")
    say(f"CPython {version}: wheels installed in {time.monotonic() - started:.1f} s")


def installed_distributions(target: Path) -> dict[str, tuple[str, list[str]]]:
    """Each distribution pip put in target: its name, and (a digest of its files, their paths).

    Read from each .dist-info/RECORD, which lists every file the wheel
    installed. Files outside target (`../../bin/…`) and bin/ (console
    scripts with .venv's shebang, of no use in the archive) are left out.
    """
    found = {}
    for record in sorted(target.glob("*.dist-info/RECORD")):
        digest = hashlib.sha256()
        paths = []
        for line in record.read_text().splitlines():
            rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
            parts = Path(rel).parts
            if not rel or ".." in parts or parts[0] == "bin" or "__pycache__" in parts:
                continue
            path = target / rel
            if not path.is_file() or path.suffix in (".pyc", ".pyo"):
                continue
            digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
            paths.append(rel)
        found[record.parent.name] = (digest.hexdigest(), paths)
    return found


def split_shared(installs: dict[str, Path], lib: Path) -> dict[str, list[tuple[str, Path]]]:
    """Which file goes where in the archive: lib/ for all versions, lib-cpXY/ for one.

    A distribution whose files are the same bytes under every version carried
    is stored once, in lib/: every pure-Python one (its WHEEL says
    Root-Is-Purelib: true), and a compiled one built for the stable ABI
    (cryptography's abi3 wheel). Each other compiled one (orjson, uvloop,
    asyncpg, …) is stored once per version, beside the others for that
    version. Measured: three versions cost 2.25 times one (50.0 MB, 22.2).
    """
    per_version = {version: installed_distributions(target) for version, target in installs.items()}
    layout: dict[str, list[tuple[str, Path]]] = {"lib": []}
    first = next(iter(installs))
    for version, target in installs.items():
        where = "lib-cp" + version.replace(".", "")
        layout[where] = []
        for name, (digest, paths) in per_version[version].items():
            shared = all(per_version[other].get(name, ("",))[0] == digest for other in installs)
            if len(installs) == 1:
                # Nothing to compare with: the wheel's own word on whether it is pure.
                shared = "Root-Is-Purelib: true" in (target / name / "WHEEL").read_text()
            if shared and version != first:
                continue
            dest = "lib" if shared else where
            layout[dest].extend((rel, target / rel) for rel in paths)
    layout["lib"].extend(
        (path.relative_to(lib).as_posix(), path) for path in sorted((lib / "llmgw").rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    )
    if len(installs) > 1:
        layout["lib-each"] = each_version_alike(layout, ["lib-cp" + v.replace(".", "") for v in installs])
    return layout


def each_version_alike(layout: dict[str, list[tuple[str, Path]]], wheres: list[str]) -> list[tuple[str, Path]]:
    """Take out of each lib-cpXY/ the files that are the same in all of them, and return them.

    A compiled distribution's .py files (aiohttp's, asyncpg's) are the same
    for every version; only its .so files differ. They cannot go in lib/: a
    package must lie in one directory on sys.path. So they are stored once,
    under lib-each/, and the bootstrap unpacks them into the running
    version's directory. Measured: 3.4 MB less for three versions.
    """
    by_where = {where: dict(layout[where]) for where in wheres}
    first, *others = wheres
    alike = []
    for rel, path in sorted(by_where[first].items()):
        data = path.read_bytes()
        if all(rel in by_where[w] and by_where[w][rel].read_bytes() == data for w in others):
            alike.append((rel, path))
    names = {rel for rel, _ in alike}
    for where in wheres:
        layout[where] = [(rel, path) for rel, path in layout[where] if rel not in names]
    return alike


def find_python(version: str) -> str | None:
    """An interpreter for CPython VERSION on this machine, or None: on PATH, then in pyenv's versions.

    pyenv's shims are passed over: one answers "command not found" for a
    version installed but not selected, where the interpreter itself is
    in ~/.pyenv/versions.
    """
    name = f"python{version}"
    for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/bin", "/usr/bin"]:
        candidate = Path(directory or ".") / name
        if "shims" not in candidate.parts and os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv.glob(f"{version}.*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


def smoke_test(pyz: Path, versions: list[str]) -> None:
    """Run the archive the way a bare machine would, under each version it carries that is here.

    With `env -i` (no PATH to .venv, no PYTHONPATH), a fresh HOME (so its
    dependencies are unpacked from scratch) and `-I -S`, so that not even
    that installation's own site-packages can stand in for something the
    archive forgot. `sim-engine --help` imports the engine's server side
    (aiohttp with its compiled parts, orjson), which `--version` alone does not.
    """
    missing = []
    for version in versions:
        python = find_python(version)
        if python is None:
            missing.append(version)
            continue
        answers = []
        with tempfile.TemporaryDirectory(prefix="llmgw-pyz-check-") as home:
            env = {"PATH": "/usr/bin:/bin", "HOME": home}
            for command in (["--version"], ["sim-engine", "--help"]):
                result = subprocess.run(
                    [python, "-I", "-S", str(pyz), *command],
                    env=env, cwd=home, capture_output=True, text=True, timeout=300,
                )
                out = (result.stdout + result.stderr).strip()
                if result.returncode != 0:
                    fail(f"the archive does not start under CPython {version} ({python} -I -S "
                         f"{pyz.name} {' '.join(command)}, exit {result.returncode}):\n{out}")
                answers.append(out.splitlines()[0] if out else "")
        say(f"CPython {version}: {python} -I -S in a bare environment answers {answers[0]!r} "
            f"and `sim-engine --help`")
    if missing:
        say(f"not checked: CPython {', '.join(missing)}, no interpreter found on PATH or in ~/.pyenv/versions")


def bundle_options(args: list[str]) -> tuple[list[str], bool, Path | None]:
    """dist's own --bundle and --wheels DIR taken out of ARGS; the rest are --python's."""
    rest, bundle, wheels = [], False, None
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg == "--bundle":
            bundle = True
        elif arg == "--wheels" and args:
            wheels = Path(args.pop(0))
        elif arg.startswith("--wheels="):
            wheels = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if wheels is not None and not bundle:
        fail("dist --wheels DIR goes with --bundle: it names where the bundle's wheels come from", 2)
    return rest, bundle, wheels


def xllamacpp_version() -> str:
    """The xllamacpp the agents install (llmgw/engines/llamacpp_install.py), read without importing llmgw."""
    text = (ROOT / "llmgw" / "engines" / "llamacpp_install.py").read_text()
    match = re.search(r'^XLLAMACPP_VERSION = "([^"]+)"', text, re.M)
    if not match:
        fail("llmgw/engines/llamacpp_install.py no longer sets XLLAMACPP_VERSION on a line of its own")
    return match.group(1)


def bundle_wheels(folder: Path, given: Path | None) -> list[Path]:
    """The xllamacpp wheel for this machine: from `given` (a folder of wheels), or fetched by pip."""
    version = xllamacpp_version()
    folder.mkdir(parents=True, exist_ok=True)
    if given is not None:
        found = sorted(given.glob(f"xllamacpp-{version}-*.whl"))
        if not found:
            fail(f"{given} has no xllamacpp-{version}-*.whl; put the wheel the agents install there, or leave "
                 "out --wheels for pip to fetch it")
        for wheel in found:
            shutil.copy2(wheel, folder / wheel.name)
    else:
        say(f"fetching the xllamacpp {version} wheel for {platform_name()} with pip")
        done = subprocess.run([str(VENV_PYTHON), "-m", "pip", "download", "--disable-pip-version-check",
                               "--no-deps", "--only-binary", ":all:", "-d", str(folder),
                               f"xllamacpp=={version}"], capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"pip could not fetch xllamacpp {version}: {done.stderr.strip().splitlines()[-1:]}; on a "
                 "machine without a registry, give the wheel with --wheels DIR")
    return sorted(folder.glob("*.whl"))


def platform_name() -> str:
    return f"{os.uname().sysname} {os.uname().machine}"


def pyz_version(pyz: Path) -> str:
    """llmgw.__version__ as the archive carries it (read, not run: this python may not be one it carries)."""
    with zipfile.ZipFile(pyz) as zf:
        text = zf.read("lib/llmgw/__init__.py").decode()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        fail(f"{shown(pyz)} carries no llmgw.__version__")
    return match.group(1)


def make_bundle(pyz: Path, wheels: list[Path], out: Path) -> Path:
    """One tar: bundle.json, SHA256SUMS, llmgw.pyz, wheels/… (llmgw/release/bundle.py reads it)."""
    version = pyz_version(pyz)
    files = {"llmgw.pyz": pyz, **{f"wheels/{w.name}": w for w in wheels}}
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {name}\n" for name, p in files.items())
    manifest = json.dumps({"version": version, "wheels": [w.name for w in wheels],
                           "xllamacpp": xllamacpp_version()}, indent=1) + "\n"
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for name, data in (("bundle.json", manifest.encode()), ("SHA256SUMS", sums.encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            tar.addfile(info, io.BytesIO(data))
        for name, path in files.items():
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 315532800
            with open(path, "rb") as f:
                tar.addfile(info, f)
    os.replace(partial, out)
    return out


def cmd_dist(args: list[str]) -> int:
    args, bundle, wheels_from = bundle_options(args)
    versions = dist_pythons(args)
    ensure_venv()
    started = time.monotonic()
    work = BUILD / "pyz"
    lib = work / "lib"
    if work.exists():
        shutil.rmtree(work)
    lib.mkdir(parents=True)

    requirements = work / "requirements.txt"
    requirements.write_text("\n".join(install_requires()) + "\n")
    constraints = work / "constraints.txt"
    frozen_constraints(constraints)
    platform = this_platform()
    say(f"installing the pinned dependencies from setup.cfg for CPython {', '.join(versions)} "
        f"on {platform['system']} {platform['machine']}")
    installs = {}
    for version in versions:
        installs[version] = installed_for(version, work / ("cp" + version.replace(".", "")), platform["tags"],
                                          requirements, constraints, WHEELS_CACHE)

    compile_locales()  # the portal's catalogues travel inside the package copied below
    say("copying the llmgw package")
    # *.partial: a file a running llmgw is writing into the checkout at this moment (the portal's catalogues,
    # llmgw.mo through llmgw.mo.partial), gone by the time it would be copied.
    shutil.copytree(
        ROOT / "llmgw", lib / "llmgw",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.partial"),
    )
    # The unit files travel inside the package: `node add --ssh` installs
    # them on a machine that has only the archive (llmgw/onboard/units.py).
    units = lib / "llmgw" / "onboard" / "units"
    units.mkdir()
    for unit in sorted((ROOT / "systemd").glob("llmgw-*.*")):
        shutil.copyfile(unit, units / unit.name)
    # The manual travels inside the package: the console's Manual screen reads llmgw/manual/*.md
    # (llmgw/console/manual.py), on a machine that has the program and no checkout.
    # The portal serves the same pages, with their pictures, at /docs (llmgw/portal/docs_pages.py).
    (lib / "llmgw" / "manual").mkdir()
    for page in sorted((ROOT / "docs").glob("*.md")):
        shutil.copy2(page, lib / "llmgw" / "manual" / page.name)
    shutil.copytree(ROOT / "docs" / "img", lib / "llmgw" / "manual" / "img")
    layout = split_shared(installs, lib)
    # What the bootstrap checks before unpacking native modules into an
    # interpreter they were not built for, where the failure would be an
    # obscure ImportError from deep inside cryptography.
    built_for = {
        "pythons": versions,
        "implementation": platform["implementation"],
        "machine": platform["machine"],
        "system": platform["system"],
    }

    DIST.mkdir(exist_ok=True)
    pyz = DIST / "llmgw.pyz"
    partial = DIST / "llmgw.pyz.partial"
    count = sum(len(files) for files in layout.values())
    say(f"writing {shown(pyz)} ({count} files: {len(layout['lib'])} shared, "
        + ", ".join(f"{len(files)} in {where}" for where, files in layout.items() if where != "lib") + ")")
    # Fixed timestamps and sorted entries: the same inputs give the same
    # bytes, and so the same cache directory on every machine.
    stamp = (1980, 1, 1, 0, 0, 0)
    with open(partial, "wb") as out:
        out.write(b"#!/usr/bin/env python3\n")
        # zlib's own level 6: level 9 took four times the CPU (55 s against 13 s over the three versions'
        # 358 MB of modules) for an archive 0.6% smaller.
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            def add(name: str, data: bytes, mode: int = 0o644) -> None:
                info = zipfile.ZipInfo(name, stamp)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (0o100000 | mode) << 16
                zf.writestr(info, data)

            add("__main__.py", (ROOT / "packaging" / "pyz_main.py").read_bytes())
            add("pyz-built-for.json", (json.dumps(built_for, sort_keys=True) + "\n").encode())
            for where in sorted(layout):
                for name, path in sorted(layout[where]):
                    mode = 0o755 if os.access(path, os.X_OK) else 0o644
                    add(f"{where}/{name}", path.read_bytes(), mode)
    partial.chmod(0o755)
    os.replace(partial, pyz)

    size = pyz.stat().st_size
    say(f"{shown(pyz)}: {size / 1e6:.1f} MB ({size} bytes), for CPython "
        f"{', '.join(versions)} on {platform['system']} {platform['machine']}, "
        f"built in {time.monotonic() - started:.0f} s")
    smoke_test(pyz, versions)
    if bundle:
        wheels = bundle_wheels(work / "bundle-wheels", wheels_from)
        out = make_bundle(pyz, wheels, DIST / f"llmgw-{pyz_version(pyz)}-bundle.tar")
        say(f"{shown(out)}: the program, {', '.join(w.name for w in wheels)} and their sha256s "
            f"({out.stat().st_size / 1e6:.1f} MB); `llmgw upgrade --from-bundle {out.name}` on a control plane")
    return 0


# --- main ----------------------------------------------------------------------

COMMANDS = {"run": cmd_run, "check": cmd_check, "test": cmd_test, "bench": cmd_bench, "locales": cmd_locales,
            "dist": cmd_dist}


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE, end="", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, args = argv[0], argv[1:]
    global INVOKED_FROM
    INVOKED_FROM = Path.cwd()  # before the chdir: `run --model` takes a path relative to where it was typed
    if command not in COMMANDS:
        print(USAGE, end="", file=sys.stderr)
        fail(f"unknown command {command!r}; it is one of: {', '.join(COMMANDS)}", 2)
    os.chdir(ROOT)
    return COMMANDS[command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
