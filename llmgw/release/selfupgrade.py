"""A machine replacing its own program: fetch it over the cluster's mutual TLS, check it, swap it, guard it.

The same for a control plane (fetching from the leader, or whichever
control plane drives the upgrade) and a node (from the control plane its
agent link is connected to). The caller exits afterwards, and its service
manager starts the new program.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl as ssl_module
from pathlib import Path

import aiohttp

from llmgw.release.program import ReleaseError, running_program, sha256_of
from llmgw.release.swap import install_program, previous_of
from llmgw.release.watchdog import start_watchdog

log = logging.getLogger("llmgw.upgrade")

RELEASE_PATH = "/release/{version}"
FETCH_TIMEOUT = 600.0


WHEEL_PATH = "/release/wheels/{name}"
WHEELS_PATH = "/release/wheels"


async def fetch_program(address: str, version: str, ssl: ssl_module.SSLContext | None, into: Path,
                        path: str = "") -> None:
    """GET https://ADDRESS/release/VERSION (or `path`) into `into`, or ReleaseError saying what the control plane
    said."""
    scheme = "https" if ssl is not None else "http"
    url = f"{scheme}://{address}{path or RELEASE_PATH.format(version=version)}"
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(url, ssl=ssl if ssl is not None else False) as response:
            if response.status != 200:
                said = (await response.text())[:300]
                raise ReleaseError(f"control plane {address} did not give llmgw {version} "
                                   f"({response.status}: {said})")
            with open(into, "wb") as out:
                async for chunk in response.content.iter_chunked(1 << 20):
                    out.write(chunk)
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise ReleaseError(f"llmgw {version} could not be fetched from control plane {address}: "
                           f"{e or type(e).__name__}") from None


async def fetch_wheels(address: str, wheels: dict[str, str], ssl: ssl_module.SSLContext | None,
                       folder: Path) -> list[Path]:
    """Each of `wheels` (name: sha256) not already in `folder`, fetched from the control plane and checked.

    A node asks before each llama.cpp install; a wheel of ~100 MB hashed each time held its event loop
    for a third of a second, so one checked here is marked (its digest, size and time beside it) and
    hashed again only once the file changed. Hashing runs in a thread.
    """
    folder.mkdir(parents=True, exist_ok=True)
    got = []
    for name, digest in wheels.items():
        if "/" in name or not name.endswith(".whl"):
            continue
        target = folder / name
        if target.is_file() and (_marked(target, digest) or await asyncio.to_thread(sha256_of, target) == digest):
            _mark(target, digest)
            got.append(target)
            continue
        partial = folder / (name + ".partial")
        await fetch_program(address, name, ssl, partial, WHEEL_PATH.format(name=name))
        if await asyncio.to_thread(sha256_of, partial) != digest:
            partial.unlink()
            raise ReleaseError(f"the wheel {name} fetched from control plane {address} does not match its sha256; "
                               "nothing was replaced")
        os.replace(partial, target)
        _mark(target, digest)
        got.append(target)
    return got


def _mark_of(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + ".sha256")


def _marked(wheel: Path, digest: str) -> bool:
    """Whether `wheel` was checked against `digest` and has not changed since (size and mtime as then)."""
    try:
        st = wheel.stat()
        return _mark_of(wheel).read_text().split() == [digest, str(st.st_size), str(st.st_mtime_ns)]
    except OSError:
        return False


def _mark(wheel: Path, digest: str) -> None:
    st = wheel.stat()
    try:
        _mark_of(wheel).write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n")
    except OSError as e:  # not kept: the next install hashes it again, nothing worse
        log.debug("the check of %s was not kept: %s", wheel, e)


async def held_wheels(address: str, ssl: ssl_module.SSLContext | None) -> dict[str, str]:
    """The engine wheels the control plane at `address` holds (name: sha256), or ReleaseError."""
    scheme = "https" if ssl is not None else "http"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session, \
                session.get(f"{scheme}://{address}{WHEELS_PATH}", ssl=ssl if ssl is not None else False) as r:
            if r.status != 200:
                raise ReleaseError(f"control plane {address} did not list its wheels ({r.status})")
            listed = await r.json()
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        raise ReleaseError(f"control plane {address} did not list its wheels: {e or type(e).__name__}") from None
    if not isinstance(listed, dict):
        raise ReleaseError(f"control plane {address} listed its wheels as something other than a mapping")
    return {str(name): str(digest) for name, digest in listed.items()}


async def upgrade_self(address: str, version: str, sha256: str, ssl: ssl_module.SSLContext | None,
                       data_dir: str, confirm_within: float) -> Path:
    """Fetch `version` from `address`, put it in place of the running program, start the watchdog; the program.

    ReleaseError (nothing replaced) when this process was not started from
    an llmgw.pyz, the fetch fails, or the sha256 does not match."""
    target = running_program()
    download = target.with_name(target.name + ".download")
    try:
        await fetch_program(address, version, ssl, download)
        install_program(target, download, sha256)
    except OSError as e:
        raise ReleaseError(f"llmgw {version} could not be put in place of {target}: {e}; nothing was "
                           "replaced") from None
    finally:
        download.unlink(missing_ok=True)
    # Which service to restart, where the service manager said (the supervised manager sets these; under
    # systemd the watchdog finds the unit from its cgroup): without one, a crash-looping build still heals,
    # since the manager's next start runs the program put back.
    extra: list[str] = []
    for flag, name in (("--unit", "LLMGW_UNIT"), ("--root", "LLMGW_ROOT")):
        if os.environ.get(name):
            extra += [flag, os.environ[name]]
    pid = start_watchdog(previous_of(target), target, version, data_dir, confirm_within, extra)
    log.info("llmgw %s is in place of %s (the previous kept as %s.previous); restarting into it, watched by "
             "pid %d for %g s", version, target, target.name, pid, confirm_within)
    return target
