"""The admin API's upgrade routes: hold a program, start an upgrade, resume it, roll it back, read how far it got.

    POST /api/v1/releases            the program's bytes (application/octet-stream): checked and held here
    POST /api/v1/wheels/NAME         an engine wheel of an offline bundle, handed to the nodes with the upgrade
    GET  /api/v1/upgrade             the upgrade record ({"upgrade": doc or null, "releases": [versions held]})
    POST /api/v1/upgrade             {"version", "wave_size", "up_within"}: a new upgrade, driven by the leader
    POST /api/v1/upgrade/resume      carry on a stopped upgrade from where it stopped
    POST /api/v1/upgrade/rollback    put every machine it touched back on the version it ran before
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.control.upgrade import make_plan, rollback_plan
from llmgw.control.upgrade.plan import FAILED, PENDING, RUNNING, STOPPED
from llmgw.control.versions import machines
from llmgw.release import ReleaseError, check_program
from llmgw.store import Conflict

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

MAX_PROGRAM = 1 << 30  # an llmgw.pyz is tens of MB; a GB is something else


async def _receive(request: web.Request, upload: Path, too_large: str) -> None:
    """The request's body into `upload`, refused with `too_large` past MAX_PROGRAM (the caller removes it)."""
    upload.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    with open(upload, "wb") as out:
        async for chunk in request.content.iter_chunked(1 << 20):
            size += len(chunk)
            if size > MAX_PROGRAM:
                raise Refused(413, too_large, "too_large")
            out.write(chunk)


def _upload_path(plane: ControlPlane) -> Path:
    return plane.upgrades.releases.directory / f".upload-{secrets.token_hex(6)}"


async def hold_release(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    releases = plane.upgrades.releases
    upload = _upload_path(plane)
    try:
        await _receive(request, upload, f"a program is under {MAX_PROGRAM >> 20} MiB; that is not an llmgw.pyz")
        try:
            held = await asyncio.to_thread(lambda: releases.hold(check_program(upload)))
        except ReleaseError as e:
            raise Refused(400, str(e).replace(str(upload), "the program sent"), "invalid_program") from None
    finally:
        upload.unlink(missing_ok=True)
    return _json({"version": held.version, "sha256": held.sha256, "releases": releases.versions()}, 201)


async def hold_wheel(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    releases = plane.upgrades.releases
    upload = _upload_path(plane)
    try:
        await _receive(request, upload, f"a wheel here is under {MAX_PROGRAM >> 20} MiB")
        expected = request.headers.get("X-Llmgw-Sha256", "")
        try:
            digest = await asyncio.to_thread(releases.hold_wheel, upload, request.match_info["name"])
        except ReleaseError as e:
            raise Refused(400, str(e), "invalid_request") from None
        if expected and digest != expected:
            raise Refused(400, f"the wheel {request.match_info['name']} arrived damaged (its sha256 is not the "
                               "bundle's); send it again", "invalid_request")
    finally:
        upload.unlink(missing_ok=True)
    return _json({"name": request.match_info["name"], "sha256": digest}, 201)


async def show(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    record = await plane.store.get_upgrade()
    return _json({"upgrade": record.doc if record else None, "revision": record.revision if record else 0,
                  "releases": plane.upgrades.releases.versions(), "wheels": plane.upgrades.releases.wheels()})


def _leader_name(plane: ControlPlane) -> str:
    lease = plane.lease.state.lease
    return lease.holder.rsplit("#", 1)[0] if lease is not None and lease.expires_at > time.time() else ""


async def start(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    version = _field(data, "version", str, True)
    wave_size = _field(data, "wave_size", int) or 1
    up_within = _field(data, "up_within", (int, float)) or 0
    if wave_size < 1:
        raise Refused(400, "--wave-size is how many nodes upgrade at once: 1 or more", "invalid_request")
    releases = plane.upgrades.releases
    try:
        found = releases.find(version)
    except ReleaseError as e:
        raise Refused(400, str(e), "invalid_request") from None
    if found is None:
        held = ", ".join(releases.versions()) or "none"
        raise Refused(404, f"this control plane holds no llmgw {version} (it holds: {held}); give the llmgw.pyz "
                           "or the offline bundle instead of the version", "not_found")
    record = await plane.store.get_upgrade()
    if record is not None and record.doc.get("state") == RUNNING:
        raise Refused(409, f"an upgrade to {record.doc.get('to') or 'the previous versions'} is under way; "
                           "`llmgw upgrade --status` shows how far it got", "conflict")
    leader = _leader_name(plane)
    if not leader:
        raise Refused(503, "no control plane leads now, so none can drive an upgrade; try again in a few seconds",
                      "no_leader")
    # What a rollback puts back: the program this control plane runs, held before any machine changes.
    await asyncio.to_thread(plane.upgrades.hold_running)
    cluster = await machines(plane.store, leader)
    doc = make_plan(to=version, sha256=releases.sha256(version), control_planes=cluster["control_planes"],
                    leader=leader, nodes=cluster["nodes"], wave_size=wave_size, by=actor(request).name)
    if up_within:
        doc["up_within"] = float(up_within)
    return await _put(request, doc, record.revision if record else 0, "upgrade.start")


async def resume(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    record = await plane.store.get_upgrade()
    if record is None or record.doc.get("state") != STOPPED:
        said = "there is no upgrade" if record is None else f"the upgrade is {record.doc.get('state')}"
        raise Refused(409, f"{said}, so there is nothing to resume; start one with `llmgw upgrade FILE`",
                      "conflict")
    doc = record.doc
    for m in doc["machines"]:
        if m["state"] == FAILED:
            m["state"], m["sentence"], m["since"] = PENDING, "", 0.0
    doc["state"], doc["sentence"] = RUNNING, ""
    return await _put(request, doc, record.revision, "upgrade.resume")


async def rollback(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    record = await plane.store.get_upgrade()
    if record is None or record.doc.get("rollback"):
        raise Refused(409, "there is no upgrade to roll back" if record is None else
                      "the last change was a rollback already", "conflict")
    if record.doc.get("state") == RUNNING:
        raise Refused(409, "the upgrade is still under way; wait for it to stop (`llmgw upgrade --status`)",
                      "conflict")
    versions = {m["from"] for m in record.doc["machines"] if m["state"] != PENDING}
    releases = plane.upgrades.releases
    missing = sorted(v for v in versions if not releases.sha256(v))
    if missing:
        raise Refused(409, f"this control plane does not hold llmgw {', '.join(missing)}, which the machines ran "
                           "before; run the rollback on the control plane that started the upgrade, or give "
                           "the program with `llmgw upgrade FILE`", "not_found")
    doc = rollback_plan(record.doc, {v: releases.sha256(v) for v in versions}, actor(request).name)
    doc["up_within"] = record.doc.get("up_within", 0)
    return await _put(request, doc, record.revision, "upgrade.rollback")


async def _put(request: web.Request, doc: dict[str, Any], revision: int, action: str) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        saved = await plane.store.put_upgrade(doc, revision, time.time())
    except Conflict:
        raise Refused(409, "another control plane changed the upgrade meanwhile; "
                           "`llmgw upgrade --status` shows it", "conflict") from None
    plane.upgrader.wake.set()
    versions = sorted({m["to"] for m in doc["machines"]})
    await plane.accounts.audit(actor(request), action, "cluster", None,
                               {"to": ", ".join(versions), "machines": len(doc["machines"]),
                                "wave_size": doc["wave_size"]})
    return _json({"upgrade": saved.doc, "revision": saved.revision, "action": action}, 202)


def register(r: web.UrlDispatcher) -> None:
    r.add_post("/api/v1/releases", hold_release)
    r.add_post("/api/v1/wheels/{name}", hold_wheel)
    r.add_get("/api/v1/upgrade", show)
    r.add_post("/api/v1/upgrade", start)
    r.add_post("/api/v1/upgrade/resume", resume)
    r.add_post("/api/v1/upgrade/rollback", rollback)



