"""One URL's bytes into a `.part` file, carried on with Range after a cut or a restart.

Hugging Face's CDN ends long transfers part way (the original's mirror lost
23 GB of a 60 GB file to a `stream error … CANCEL` and started again from
nothing). So what arrived stays in `.NAME.part`, and the next request asks
for the rest: `Range: bytes=N-`, with `If-Range` naming the version of the
file the first part came from. A server that answers 200 to that (it does
not do ranges, or the file changed) sends the whole file, and the part is
started again; a 206 whose Content-Range does not start at N is not
trusted either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import ssl as ssl_module
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from llmgw.hub.transfererrors import FetchFailed, WeightsError, redact

log = logging.getLogger("llmgw.hub.download")

_WRITE_BATCH = 4 << 20
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")
_UNSATISFIED_RANGE = re.compile(r"^bytes\s+\*/(\d+)$")
# Statuses a later try can get past: the server busy or restarting.
_TRANSIENT = {408, 425, 429, 500, 502, 503, 504}
# An llmgw mirror asked for a file it is still fetching answers 503 with these: how far it has got, so the node's
# own progress moves (and its start is not given up) while it waits, however long the mirror's download takes.
MIRROR_PHASE = "X-Llmgw-Mirror-Phase"
MIRROR_DONE = "X-Llmgw-Mirror-Done"
MIRROR_TOTAL = "X-Llmgw-Mirror-Total"
_MIRROR_WAIT_MOST = 30.0


def part_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.part")


def meta_path(target: Path) -> Path:
    """What the part was fetched as (ETag, Last-Modified, size), for If-Range after a restart."""
    return target.with_name(f".{target.name}.part.json")


@dataclass
class Attempts:
    """How often to try again after a cut, and how long to wait before each try."""

    tries: int = 6
    """Tries in a row that bring no new byte before giving up; one that brings some starts the count again."""
    delays: tuple[float, ...] = (0.5, 1, 2, 4, 8, 15)


def _read_meta(target: Path) -> dict[str, Any]:
    try:
        meta = json.loads(meta_path(target).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _write_meta(target: Path, meta: dict[str, Any]) -> None:
    meta_path(target).write_text(json.dumps(meta))


def _validator(meta: dict[str, Any]) -> str:
    # If-Range takes a strong ETag or a date; a weak ETag (W/"…") says the
    # bytes may differ, which is exactly what a resume cannot have.
    etag = meta.get("etag") or ""
    if etag and not etag.startswith("W/"):
        return etag
    return meta.get("last_modified") or ""


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def check_room(directory: Path, needed: int, source: str) -> None:
    """Refuse a download the disk has no room for, before it fills the disk other shards' engines write to."""
    if needed <= 0:
        return
    # The filesystem that will hold it: a fresh node's cache folder is made by the first download into it, and a
    # set of files is measured before its first byte.
    measured = directory
    while not measured.exists() and measured.parent != measured:
        measured = measured.parent
    free = shutil.disk_usage(measured).free
    # A little left over: a disk filled to the byte breaks everything else on it.
    if free < needed + (64 << 20):
        raise WeightsError(
            f"{redact(source)} needs {_gb(needed)} more and {directory} has {_gb(free)} free: "
            "remove weights no model uses (llmgw ctl model remove --purge), or put cache_dir on a larger disk"
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


async def download_part(
    session: aiohttp.ClientSession,
    url: str,
    target: Path,
    *,
    source: str,
    headers: dict[str, str],
    advice: Callable[[int], str],
    on_bytes: Callable[[int, int], None],
    attempts: Attempts,
    ssl: ssl_module.SSLContext | None = None,
) -> int:
    """Bring `url` into `target`'s part file, whole; return its size. The caller renames it once checked.

    on_bytes(done, total) is called as bytes arrive (total 0 when not known). `ssl`: the context to dial with,
    for a model mirror (the cluster's CA and the node's certificate); None is the system's authorities.
    """
    part = part_path(target)
    part.parent.mkdir(parents=True, exist_ok=True)
    fruitless = 0
    last_error = ""
    while True:
        have = size_of(part)
        try:
            done = await _one_try(session, url, target, have, source=source, headers=headers,
                                  advice=advice, on_bytes=on_bytes, ssl=ssl)
            if done is not None:
                return done
            last_error = "the connection ended before the whole file arrived"
        except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
            last_error = str(e) or type(e).__name__
        except FetchFailed as e:
            if e.status not in _TRANSIENT:
                raise
            if e.wait:
                # A mirror bringing the file in: not a failed try, however many of these it takes.
                await asyncio.sleep(min(e.wait, _MIRROR_WAIT_MOST))
                continue
            last_error = str(e)
        fruitless = 0 if size_of(part) > have else fruitless + 1
        if fruitless >= attempts.tries:
            got = size_of(part)
            kept = f"; the {_gb(got)} that arrived are kept and the next try carries on from there" if got else ""
            raise FetchFailed(
                f"{redact(source)} could not be fetched: {attempts.tries} tries in a row brought nothing more "
                f"({last_error}){kept}. Is the server reachable from this node?"
            )
        delay = attempts.delays[min(fruitless, len(attempts.delays) - 1)] if attempts.delays else 0
        log.info("download of %s cut at %d bytes (%s); carrying on in %.1fs",
                 redact(source), size_of(part), last_error, delay)
        await asyncio.sleep(delay)


async def _one_try(
    session: aiohttp.ClientSession,
    url: str,
    target: Path,
    have: int,
    *,
    source: str,
    headers: dict[str, str],
    advice: Callable[[int], str],
    on_bytes: Callable[[int, int], None],
    ssl: ssl_module.SSLContext | None = None,
) -> int | None:
    """One request: the size when the part is whole, None when the connection ended early."""
    part = part_path(target)
    meta = _read_meta(target)
    request = dict(headers)
    # Ranges count the bytes as stored; a body compressed on the way would
    # shift every offset after the first cut.
    request["Accept-Encoding"] = "identity"
    if have:
        request["Range"] = f"bytes={have}-"
        if validator := _validator(meta):
            request["If-Range"] = validator
    async with session.get(url, headers=request, ssl=ssl or True) as resp:
        if resp.status == 503 and resp.headers.get(MIRROR_PHASE):
            said_done, said_total = (resp.headers.get(h, "") for h in (MIRROR_DONE, MIRROR_TOTAL))
            on_bytes(int(said_done) if said_done.isdigit() else 0, int(said_total) if said_total.isdigit() else 0)
            wait = resp.headers.get("Retry-After", "")
            raise FetchFailed(f"{redact(source)}: the mirror is {resp.headers[MIRROR_PHASE]} it", status=503,
                              wait=float(wait) if wait.isdigit() else 5.0)
        if resp.status == 416 and have:
            # Asked for bytes past the end: the part may be whole already.
            whole = _UNSATISFIED_RANGE.match(resp.headers.get("Content-Range", ""))
            if whole and int(whole.group(1)) == have:
                return have
            log.info("%s refused the range from %d; starting it again", redact(source), have)
            _start_again(target)
            return None
        if resp.status == 206 and have:
            m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != have:
                log.info("%s sent a range that does not start at %d; starting it again", redact(source), have)
                _start_again(target)
                return None
            total = int(m.group(3)) if m.group(3) != "*" else 0
            if meta.get("total") and total and total != meta["total"]:
                # The file at the source is not the one the part came from.
                _start_again(target)
                return None
            mode = "ab"
        elif resp.status == 200:
            if have:
                log.info("%s answered a range with the whole file; starting the part again", redact(source))
            total = resp.content_length or 0
            mode = "wb"
            have = 0
        else:
            raise FetchFailed(
                f"{redact(source)} answered {resp.status} {resp.reason or ''}".rstrip() + f": {advice(resp.status)}",
                status=resp.status,
            )
        _write_meta(target, {
            "etag": resp.headers.get("ETag", ""),
            "last_modified": resp.headers.get("Last-Modified", ""),
            "total": total,
        })
        if total:
            check_room(part.parent, total - have, source)
        on_bytes(have, total)
        done = have
        buf = bytearray()
        with open(part, mode) as f:
            try:
                async for chunk in resp.content.iter_chunked(1 << 20):
                    buf += chunk
                    done += len(chunk)
                    if len(buf) >= _WRITE_BATCH:
                        await asyncio.to_thread(f.write, bytes(buf))
                        buf.clear()
                    on_bytes(done, total)
            finally:
                # What arrived before a cut is kept: it is where the next try starts.
                if buf:
                    f.write(buf)
                f.flush()
        if total and done < total:
            return None
        on_bytes(done, total or done)
        return done


def _start_again(target: Path) -> None:
    for p in (part_path(target), meta_path(target)):
        p.unlink(missing_ok=True)


def finish(target: Path) -> None:
    """The part becomes the file: synced first, so a power cut never leaves a named file that is half there."""
    part = part_path(target)
    fd = os.open(part, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(part, target)
    meta_path(target).unlink(missing_ok=True)


def discard(target: Path) -> None:
    """Throw away a part and what it was fetched as."""
    _start_again(target)
