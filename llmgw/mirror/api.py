"""The mirror's one listener, over mutual TLS with the cluster's certificates.

    GET|HEAD /ORG/REPO/resolve/COMMIT/PATH     a held file's bytes, with ranges (Hugging Face's own path, so a
                                               node fetches from the mirror as it would from the hub)
    GET  /mirror/v1/files                      every file: held, being fetched, failed; the models using each
    POST /mirror/v1/files {source, sha256}     pin and fetch (hf:… or an address); answers once it is here
    DELETE /mirror/v1/files/KEY                remove (refused while a catalog model loads it)
    PUT  /mirror/v1/wanted {files, from_hub}   the catalog's pins, from the leading control plane; from_hub false:
                                               another mirror fetches them, this one copies from it
    GET  /mirror/v1/state                      what a peer reads to keep in step
    POST /mirror/v1/import {dir}               files carried in on a disk (importing.py)
    GET  /health

Every client shows a certificate from the cluster CA (the TLS layer refuses any other, and any client without
one). Nodes read; control planes, the other mirror and `llmgw mirror` on this machine (which dials with this
machine's control plane certificate) may change what is kept.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from typing import IO, Any

import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from llmgw.hub import MIRROR_DONE, MIRROR_PHASE, MIRROR_TOTAL
from llmgw.mirror import hubapi
from llmgw.mirror.holdings import BadKey, FileKey
from llmgw.mirror.service import Mirror, MirrorError
from llmgw.trust import peer_identity

log = logging.getLogger("llmgw.mirror")

MIRROR = web.AppKey("mirror", Mirror)
# How long a node asking for a file the mirror is still fetching is told to wait before asking again.
RETRY_AFTER_S = 5


def _error(status: int, message: str, **more: Any) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": {"message": message, **more}}),
                        content_type="application/json")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def who(request: web.Request) -> tuple[str, str] | None:
    return peer_identity(request)


@web.middleware
async def _guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    caller = who(request)
    if caller is None:
        return _error(403, "the mirror answers the cluster's nodes and control planes only: show a certificate "
                           "from its CA")
    # Nodes and other mirrors read (a mirror reads its peer's list and files to keep in step); control planes
    # change what is kept, and so does `llmgw mirror` on a mirror's own machine, which dials with the mirror's own
    # certificate: a control plane's where the mirror runs beside one, else the mirror's (`add-peer`).
    if (request.method not in ("GET", "HEAD") and caller[0] != "control-plane"
            and not (caller[0] == "mirror" and caller == request.app[MIRROR].own_identity)):
        return _error(403, "only a control plane (or `llmgw mirror` on the mirror's machine) may change what the "
                           "mirror keeps")
    try:
        return await handler(request)
    except MirrorError as e:
        return _error(e.status, str(e))


async def _bytes(request: web.Request) -> web.StreamResponse:
    mirror = request.app[MIRROR]
    info = request.match_info
    try:
        key = FileKey(f"{info['org']}/{info['repo']}", info["commit"], info["path"])
    except BadKey as e:
        return _error(404, f"the mirror serves files by the commit they were pinned at: {e}")
    held = mirror.holdings.get(key)
    if held is None:
        progress = mirror.waiting(key)
        if progress is None:
            return _error(404, f"the mirror holds no {key}; `llmgw mirror add` fetches it, and a model added to "
                               "the catalog is fetched by itself")
        if progress.phase == "failed":
            # Not a wait: a node gives up after its own tries, with the mirror's reason.
            return _error(502, f"the mirror could not fetch {key}: {progress.error}")
        fetching = progress.total and progress.phase == "fetching"
        share = f" ({100 * progress.done // progress.total}%)" if fetching else ""
        response = _error(503, f"the mirror is {progress.phase} {key}{share}; ask again in {RETRY_AFTER_S} s",
                          phase=progress.phase, done=progress.done, total=progress.total)
        response.headers.update({"Retry-After": str(RETRY_AFTER_S), MIRROR_PHASE: progress.phase,
                                 MIRROR_DONE: str(progress.done), MIRROR_TOTAL: str(progress.total)})
        return response
    path = mirror.holdings.path_of(key)
    return _HeldFile(path, chunk_size=1 << 20, headers={
        "X-Repo-Commit": key.commit, "X-Linked-Size": str(held.size), "X-Linked-Etag": f'"{held.sha256}"',
        "X-Llmgw-Sha256": held.sha256, "Content-Type": "application/octet-stream"})


class _HeldFile(web.FileResponse):
    """A held file's bytes, each chunk read on the event loop where the page cache has it, else in a worker thread.

    TLS rules out sendfile, so aiohttp sends a file by reading each chunk in a worker thread. Measured with
    `build.py bench mirror` (2 GB, a 2-core machine), that cost the mirror 1.4 CPU-seconds a GB served to four
    nodes at once against 0.9 to one: the hand-offs to and from the threads, and each chunk allocated in a thread's
    malloc arena and freed in the loop's, which glibc gave back to the kernel and faulted in again (a tenth of the
    mirror's samples under perf). Read here with RWF_NOWAIT, which never waits on the disk, four at once cost 0.8 to
    0.9 a GB. A chunk the page cache does not hold is read in a thread as before, so a file on a cold disk never
    stalls the other downloads.

    (uvloop, the mirror's loop on Linux, has no loop.sendfile, so aiohttp comes here for every file; asyncio's own
    loop sends a file over TLS by a fallback of its own and never calls this.)
    """

    async def _sendfile_fallback(self, writer: AbstractStreamWriter, fobj: IO[Any], offset: int, count: int
                                 ) -> AbstractStreamWriter:
        fd, loop, nowait = fobj.fileno(), asyncio.get_running_loop(), _NOWAIT
        while count > 0:
            size = min(self._chunk_size, count)
            chunk: bytes | bytearray | None = None
            if nowait:
                buffer = bytearray(size)
                try:
                    got = os.preadv(fd, [buffer], offset, os.RWF_NOWAIT)
                    chunk = buffer if got == size else buffer[:got]
                except BlockingIOError:
                    pass  # not in the page cache: the thread waits for the disk
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:
                        raise
                    nowait = False  # a file system that cannot say; a thread reads every chunk
            if chunk is None:
                chunk = await loop.run_in_executor(None, os.pread, fd, size, offset)
            if not chunk:
                break
            await writer.write(chunk)
            offset += len(chunk)
            count -= len(chunk)
            # The write returns at once while the socket takes what it is given, and so would the next read: without
            # a turn here one fast reader kept the loop to itself, the other nodes' downloads (and /health) waiting.
            await asyncio.sleep(0)
        await writer.drain()
        return writer


_NOWAIT = hasattr(os, "RWF_NOWAIT")


async def _files(request: web.Request) -> web.Response:
    return _json(request.app[MIRROR].listing())


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise MirrorError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise MirrorError("the body is not a JSON object")
    return body


async def _add(request: web.Request) -> web.Response:
    body = await _body(request)
    source, sha256 = body.get("source"), body.get("sha256") or ""
    if not isinstance(source, str) or not source or not isinstance(sha256, str):
        raise MirrorError("give source (hf:org/repo/file or an address) and, for an address, sha256")
    keys = await request.app[MIRROR].add(source, sha256)
    return _json({"added": [str(k) for k in keys]}, 201)


async def _remove(request: web.Request) -> web.Response:
    mirror = request.app[MIRROR]
    keys = mirror.match(request.match_info["key"])
    for key in keys:
        mirror.remove(key)
    log.info("removed %s, as %s asked", ", ".join(str(k) for k in keys), who(request))
    return _json({"removed": [str(k) for k in keys]})


async def _wanted(request: web.Request) -> web.Response:
    body = await _body(request)
    files = body.get("files")
    if not isinstance(files, list):
        raise MirrorError("give files: the catalog's pinned files")
    missing = request.app[MIRROR].set_wanted(files, from_hub=body.get("from_hub") is not False)
    return _json({"wanted": len(files), "missing": missing})


async def _state(request: web.Request) -> web.Response:
    return _json(request.app[MIRROR].state())


async def _import(request: web.Request) -> web.Response:
    from llmgw.mirror.importing import import_dir

    body = await _body(request)
    folder = body.get("dir")
    if not isinstance(folder, str) or not folder:
        raise MirrorError("give dir: the folder on the mirror's machine to import from")
    report = await import_dir(request.app[MIRROR], folder)
    return _json(report)


async def _hub_revision(request: web.Request) -> web.Response:
    return await hubapi.revision(request, request.app[MIRROR])


async def _hub_tree(request: web.Request) -> web.Response:
    return await hubapi.tree(request, request.app[MIRROR])


async def _health(request: web.Request) -> web.Response:
    mirror = request.app[MIRROR]
    return _json({"ok": True, "held": len(mirror.holdings.held), "missing": len(mirror.holdings.missing())})


def make_app(mirror: Mirror) -> web.Application:
    app = web.Application(middlewares=[_guard], client_max_size=64 << 20)
    app[MIRROR] = mirror
    app.router.add_get(r"/{org}/{repo}/resolve/{commit}/{path:.+}", _bytes)
    app.router.add_get("/mirror/v1/files", _files)
    app.router.add_post("/mirror/v1/files", _add)
    app.router.add_delete(r"/mirror/v1/files/{key:.+}", _remove)
    app.router.add_put("/mirror/v1/wanted", _wanted)
    app.router.add_get("/mirror/v1/state", _state)
    app.router.add_post("/mirror/v1/import", _import)
    app.router.add_get("/health", _health)
    # Hugging Face's API for what the mirror holds, so a control plane pins from it where no hub can be reached.
    app.router.add_get(r"/api/models/{org}/{repo}/revision/{revision}", _hub_revision)
    app.router.add_get(r"/api/models/{org}/{repo}/tree/{commit}", _hub_tree)

    async def started(_app: web.Application) -> None:
        await mirror.start()

    async def stopped(_app: web.Application) -> None:
        await mirror.stop()

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    return app

