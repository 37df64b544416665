"""The mirror's one listener, over mutual TLS with the cluster's certificates.

    GET|HEAD /ORG/REPO/resolve/COMMIT/PATH     a held file's bytes, with ranges (Hugging Face's own path, so a
                                               node fetches from the mirror as it would from the hub)
    GET  /mirror/v1/files                      every file: held, being fetched, failed; the models using each
    POST /mirror/v1/files {source, sha256}     pin and fetch (hf:… or an address); answers once it is here
    DELETE /mirror/v1/files/KEY                remove (refused while a catalog model loads it)
    PUT  /mirror/v1/wanted {files: [...]}      the catalog's pins, from the leading control plane
    GET  /mirror/v1/state                      what a peer reads to keep in step
    POST /mirror/v1/import {dir}               files carried in on a disk (importing.py)
    GET  /health

Every client shows a certificate from the cluster CA (the TLS layer refuses any other, and any client without
one). Nodes read; control planes, the other mirror and `llmgw mirror` on this machine (which dials with this
machine's control plane certificate) may change what is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from llmgw.hub import MIRROR_DONE, MIRROR_PHASE, MIRROR_TOTAL
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
    if request.method not in ("GET", "HEAD") and caller[0] != "control-plane":
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
    return web.FileResponse(path, chunk_size=1 << 20, headers={
        "X-Repo-Commit": key.commit, "X-Linked-Size": str(held.size), "X-Linked-Etag": f'"{held.sha256}"',
        "X-Llmgw-Sha256": held.sha256, "Content-Type": "application/octet-stream"})


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
    missing = request.app[MIRROR].set_wanted(files)
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

    async def started(_app: web.Application) -> None:
        await mirror.start()

    async def stopped(_app: web.Application) -> None:
        await mirror.stop()

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    return app

