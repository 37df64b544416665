"""A control plane's side of upgrades on the cluster's mTLS port: handing out programs, and upgrading itself.

- GET /release/wheels: the engine wheels an offline bundle brought (name:
  sha256), and GET /release/wheels/NAME, each, to the nodes.
- GET /release/VERSION: the program this control plane holds for VERSION,
  to a node or another control plane of the cluster (the port's middleware
  has refused anyone else).
- POST /upgrade/self {"version", "sha256", "from"}: from the control plane
  driving an upgrade: fetch VERSION from it, put it in place of this
  program, start the watchdog, answer 202, and stop, for the service
  manager to start the new program. Where this process may not replace its
  program (systemd runs it as llmgw), the program is staged for the root
  upgrade helper instead (llmgw.release.helper), which restarts it.

Whichever control plane leads next reads from `Releases`, so a control
plane that upgraded holds both programs: the one it ran (what a rollback
puts back) and the new one.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from llmgw import __version__
from llmgw.release import (
    ReleaseError,
    Releases,
    Request,
    can_replace,
    check_program,
    fetch_program,
    fetch_wheels,
    helper_installed,
    running_program,
    sha256_of,
    stage,
    upgrade_self,
)
from llmgw.trust import peer_control_plane

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

log = logging.getLogger("llmgw.upgrade")

SELF_PATH = "/upgrade/self"
LINGER_S = 2.0  # the 202 reaches the driver, and the driver has written it, before this process stops


def _error(status: int, message: str, code: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": {"message": message, "code": code}}),
                        content_type="application/json")


class UpgradeMachine:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.releases = Releases(Path(plane.cfg.data_dir) / "releases")
        self.upgrading = False

    def mount(self, app: web.Application) -> None:
        app.router.add_get("/release/wheels", self.wheel_list)
        app.router.add_get("/release/wheels/{name}", self.wheel)
        app.router.add_get("/release/{version}", self.release)
        app.router.add_post(SELF_PATH, self.handle_self)

    def hold_running(self) -> str:
        """Hold the program this process runs as its version's release (what a rollback puts back); its sha256."""
        try:
            held = self.releases.hold(check_program(running_program()))
        except ReleaseError as e:
            log.info("this program is not held as a release: %s", e)
            return ""
        return held.sha256

    async def release(self, request: web.Request) -> web.StreamResponse:
        version = request.match_info["version"]
        try:
            path = self.releases.find(version)
        except ReleaseError as e:
            return _error(400, str(e), "invalid_request")
        if path is None:
            return _error(404, f"control plane {self.plane.name} holds no llmgw {version}", "not_found")
        return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})

    async def wheel_list(self, request: web.Request) -> web.Response:
        """The engine wheels this control plane holds (name: sha256): what a node that joined after the
        bundle's upgrade fetches before it installs llama.cpp's server."""
        return web.json_response(await asyncio.to_thread(self.releases.wheels))

    async def wheel(self, request: web.Request) -> web.StreamResponse:
        path = self.releases.wheel(request.match_info["name"])
        if path is None:
            return _error(404, f"control plane {self.plane.name} holds no wheel {request.match_info['name']}",
                          "not_found")
        return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})

    async def handle_self(self, request: web.Request) -> web.Response:
        if peer_control_plane(request) is None:
            return _error(403, "only a control plane of this cluster tells another to upgrade", "control_plane_only")
        try:
            data = orjson.loads(await request.read())
            version, sha256, source = str(data["version"]), str(data["sha256"]), str(data["from"])
            within = float(data.get("confirm_within_s", 90.0))
            wheels = {str(k): str(v) for k, v in (data.get("wheels") or {}).items()}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return _error(400, 'an upgrade takes {"version", "sha256", "from"}', "invalid_request")
        if version == __version__:
            return web.json_response({"version": version, "already": True})
        if self.upgrading:
            return _error(409, f"control plane {self.plane.name} is already upgrading", "conflict")
        self.upgrading = True
        try:
            await asyncio.to_thread(self.hold_running)
            # The bundle's wheels first: this control plane may lead when the nodes ask for them.
            for got in await fetch_wheels(source, wheels, self.plane.exchange.client_context(),
                                          self.releases.directory / ".incoming-wheels"):
                await asyncio.to_thread(self.releases.hold_wheel, got, got.name)
            if not await asyncio.to_thread(can_replace, running_program()):
                await self.through_helper(source, version, sha256, within)
                log.info("llmgw %s fetched from the control plane at %s and staged; the upgrade helper puts it "
                         "in place and restarts this control plane", version, source)
                return web.json_response({"version": version, "already": False, "helper": True}, status=202)
            target = await upgrade_self(source, version, sha256, self.plane.exchange.client_context(),
                                        self.plane.cfg.data_dir, within)
            # Held for the nodes and for the next leader: this control plane may lead when they fetch it.
            await asyncio.to_thread(lambda: self.releases.hold(check_program(target)))
        except ReleaseError as e:
            self.upgrading = False
            return _error(409, str(e), "not_upgraded")
        log.info("upgraded to %s by the control plane at %s; restarting into it", version, source)
        asyncio.get_running_loop().call_later(LINGER_S, self.plane.stop_requested.set)
        return web.json_response({"version": version, "already": False}, status=202)

    async def through_helper(self, source: str, version: str, sha256: str, within: float) -> None:
        """This process may not replace its own program (systemd runs it as llmgw, ProtectSystem=strict): the
        program fetched, checked, held, and staged for llmgw-upgrade.service, which runs as root (helper.py)."""
        if not helper_installed():
            raise ReleaseError(f"this control plane runs as a user that cannot replace {running_program()}, and "
                               "the upgrade helper is not installed (/etc/systemd/system/llmgw-upgrade.path); "
                               "install it with `systemctl enable --now llmgw-upgrade.path` from the units in "
                               "systemd/, or upgrade this machine with sudo")
        incoming = self.releases.directory / f".incoming-{version}.pyz"
        try:
            await fetch_program(source, version, self.plane.exchange.client_context(), incoming)
            if await asyncio.to_thread(sha256_of, incoming) != sha256:
                raise ReleaseError(f"llmgw {version} fetched from {source} does not match its sha256; nothing was "
                                   "staged")
            program = await asyncio.to_thread(check_program, incoming)
            await asyncio.to_thread(self.releases.hold, program)
            await asyncio.to_thread(stage, self.releases.directory, incoming,
                                    Request(version, sha256, f"llmgw-{version}.pyz", within))
        finally:
            incoming.unlink(missing_ok=True)
