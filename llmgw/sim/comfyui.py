"""`llmgw sim-engine --comfyui`: a stand-in for ComfyUI that speaks its HTTP and websocket protocol.

ComfyUI cannot be installed where llmgw is tested (torch, a card, models),
so its engine and the gateway's picture routes are tested against this: the
routes of ComfyUI's server.py with their JSON shapes and status codes, its
websocket messages in their order (comfyrun.py), its graph check
(comfycheck.py) and a handful of its nodes (comfynodes.py), making real PNG
files whose pixels are a pattern of the prompt and seed. Every route is also
served under /api, as ComfyUI serves them for its frontend.

What it leaves out: diffusion, custom nodes, the web interface, users,
/free, /models, the internal routes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw import stopsignals
from llmgw.sim.comfycheck import validate_prompt
from llmgw.sim.comfynodes import NODES, Folders, checkpoint_names
from llmgw.sim.comfyrun import Item, Runner
from llmgw.sim.server import SHUTDOWN_SECONDS, bind, url

# What /system_stats says it is: a ComfyUI of late 2025, so clients that read the version see a current one.
COMFYUI_VERSION = "0.3.66"
# ComfyUI's --max-upload-size default, in MB.
MAX_UPLOAD_MB = 100


@dataclass(frozen=True)
class ComfyConfig:
    host: str = "127.0.0.1"
    port: int = 8188
    cpu: bool = False
    # Seconds a sampler step takes, so that progress can be watched (and interrupted) between steps.
    step_seconds: float = 0.02
    # A KSampler whose prompt holds this word fails halfway, as a node that raises does; None: none fails.
    fail_word: str | None = "explode"
    # --preview-method other than none: a small PNG preview as a binary frame after each step.
    previews: bool = False
    # LLMGW_COMFYUI_MODEL as the agent sets it: the weights CheckpointLoaderSimple offers.
    model_path: str | None = None


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, ensure_ascii=False))


class ComfyServer:
    def __init__(self, cfg: ComfyConfig, root: Path):
        self.cfg = cfg
        self.folders = Folders(root, checkpoint_names(cfg.model_path))
        for folder in (self.folders.input, self.folders.output, self.folders.temp):
            folder.mkdir(parents=True, exist_ok=True)
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.number = 0
        self.runner = Runner(self.folders, self.send, step_seconds=cfg.step_seconds, fail_word=cfg.fail_word,
                             previews=cfg.previews)
        self.app = web.Application(client_max_size=MAX_UPLOAD_MB * 1024 * 1024)
        routes = [
            web.get("/ws", self.websocket), web.get("/", self.root), web.get("/system_stats", self.system_stats),
            web.get("/object_info", self.object_info), web.get("/object_info/{node_class}", self.object_info_node),
            web.get("/prompt", self.get_prompt), web.post("/prompt", self.post_prompt),
            web.get("/queue", self.get_queue), web.post("/queue", self.post_queue),
            web.post("/interrupt", self.post_interrupt), web.get("/history", self.get_history),
            web.get("/history/{prompt_id}", self.get_history_item), web.post("/history", self.post_history),
            web.get("/view", self.view), web.post("/upload/image", self.upload_image),
            web.get("/embeddings", self.embeddings),
        ]
        # ComfyUI serves each route under /api too; its frontend calls those.
        self.app.add_routes(routes + [web.route(r.method, "/api" + r.path, r.handler) for r in routes])

    # -- sending, as server.py's send: JSON {"type", "data"} or a binary frame, to one client or to all

    async def send(self, event: str, data: Any, sid: str | None) -> None:
        targets = list(self.sockets.values()) if sid is None else [self.sockets[sid]] if sid in self.sockets else []
        for ws in targets:
            try:
                if isinstance(data, bytes | bytearray):
                    await ws.send_bytes(bytes(data))
                else:
                    await ws.send_str(json.dumps({"type": event, "data": data}))
            except (aiohttp.ClientError, ConnectionError, RuntimeError):
                pass  # a socket closing as we send: ComfyUI logs and goes on too

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_UPLOAD_MB * 1024 * 1024)
        await ws.prepare(request)
        sid = request.query.get("clientId", "") or uuid.uuid4().hex
        self.sockets[sid] = ws  # a client id connecting again replaces its old socket
        try:
            await self.send("status", {"status": self.runner.queue_info(), "sid": sid}, sid)
            if self.runner.client_id == sid and self.runner.last_node_id is not None:
                await self.send("executing", {"node": self.runner.last_node_id}, sid)
            first = True
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT and first:
                    try:
                        said = json.loads(msg.data)
                    except ValueError:
                        said = None
                    if isinstance(said, dict) and said.get("type") == "feature_flags":
                        await self.send("feature_flags", {"supports_preview_metadata": False,
                                                          "max_upload_size": MAX_UPLOAD_MB * 1024 * 1024}, sid)
                first = False
        finally:
            if self.sockets.get(sid) is ws:
                del self.sockets[sid]
        return ws

    # -- what it is and what it knows

    async def root(self, request: web.Request) -> web.Response:
        return web.Response(text="A ComfyUI stand-in (llmgw sim-engine --comfyui): its API, no web interface.\n")

    async def system_stats(self, request: web.Request) -> web.Response:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        available = os.sysconf("SC_AVPHYS_PAGES")
        ram, free = pages * page, available * page
        if self.cfg.cpu:
            device = {"name": "cpu", "type": "cpu", "index": None, "vram_total": ram, "vram_free": free,
                      "torch_vram_total": ram, "torch_vram_free": free}
        else:
            device = {"name": "cuda:0 llmgw sim-engine : cudaMallocAsync", "type": "cuda", "index": 0,
                      "vram_total": 24 * 2**30, "vram_free": 23 * 2**30, "torch_vram_total": 0, "torch_vram_free": 0}
        return _json({
            "system": {"os": os.name, "ram_total": ram, "ram_free": free, "comfyui_version": COMFYUI_VERSION,
                       "required_frontend_version": "", "installed_templates_version": "",
                       "python_version": sys.version, "pytorch_version": "none (llmgw sim-engine)",
                       "embedded_python": False, "argv": sys.argv, "llmgw_model": self.cfg.model_path,
                       "platform": platform.platform()},
            "devices": [device],
        })

    async def object_info(self, request: web.Request) -> web.Response:
        return _json({name: cls.info(self.folders) for name, cls in NODES.items()})

    async def object_info_node(self, request: web.Request) -> web.Response:
        name = request.match_info["node_class"]
        return _json({name: NODES[name].info(self.folders)} if name in NODES else {})

    async def embeddings(self, request: web.Request) -> web.Response:
        return _json([])

    # -- the queue

    async def get_prompt(self, request: web.Request) -> web.Response:
        return _json(self.runner.queue_info())

    async def post_prompt(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _json({"error": {"type": "invalid_prompt", "message": "The request body is not a JSON object.",
                                    "details": "", "extra_info": {}}, "node_errors": {}}, 400)
        if "number" in body:
            try:
                number = float(body["number"])
            except (TypeError, ValueError):
                number = float(self.number)
        else:
            number = -self.number if body.get("front") else self.number
            self.number += 1
        if "prompt" not in body:
            return _json({"error": {"type": "no_prompt", "message": "No prompt provided",
                                    "details": "No prompt provided", "extra_info": {}}, "node_errors": {}}, 400)
        prompt = body["prompt"]
        prompt_id = str(body.get("prompt_id") or uuid.uuid4())
        partial = body.get("partial_execution_targets")
        valid, error, outputs, node_errors = validate_prompt(prompt, self.folders,
                                                             partial if isinstance(partial, list) else None)
        if not valid:
            return _json({"error": error, "node_errors": node_errors}, 400)
        extra: dict[str, Any] = body["extra_data"] if isinstance(body.get("extra_data"), dict) else {}
        if "client_id" in body:
            extra["client_id"] = body["client_id"]
        await self.runner.put(Item(number, prompt_id, prompt, extra, outputs))
        return _json({"prompt_id": prompt_id, "number": number, "node_errors": node_errors})

    async def get_queue(self, request: web.Request) -> web.Response:
        running, pending = self.runner.current()
        return _json({"queue_running": running, "queue_pending": pending})

    async def post_queue(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if body.get("clear"):
            await self.runner.wipe()
        for prompt_id in body.get("delete") or []:
            await self.runner.delete(str(prompt_id))
        return web.Response(status=200)

    async def post_interrupt(self, request: web.Request) -> web.Response:
        prompt_id = (await _body(request)).get("prompt_id")
        self.runner.interrupt(str(prompt_id) if prompt_id else None)
        return web.Response(status=200)

    async def get_history(self, request: web.Request) -> web.Response:
        items = list(self.runner.history.items())
        most = request.query.get("max_items")
        if most is not None and most.isdigit():
            items = items[-int(most):] if int(most) else []
        return _json(dict(items))

    async def get_history_item(self, request: web.Request) -> web.Response:
        prompt_id = request.match_info["prompt_id"]
        entry = self.runner.history.get(prompt_id)
        return _json({prompt_id: entry} if entry is not None else {})

    async def post_history(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if body.get("clear"):
            self.runner.history.clear()
        for prompt_id in body.get("delete") or []:
            self.runner.history.pop(str(prompt_id), None)
        return web.Response(status=200)

    # -- files

    async def view(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        filename = q.get("filename")
        if filename is None:
            return web.Response(status=404)
        # server.py's own checks, in its order and with its statuses: 400 a name that climbs, 403 a subfolder.
        if not filename or filename[0] == "/" or ".." in filename:
            return web.Response(status=400)
        folder = self.folders.by_type(q.get("type", "output"))
        if folder is None:
            return web.Response(status=400)
        base = os.path.realpath(folder)
        if "subfolder" in q:
            full = os.path.realpath(os.path.join(base, q["subfolder"]))
            if os.path.commonpath((full, base)) != base:
                return web.Response(status=403)
            base = full
        name = os.path.basename(filename)
        path = os.path.join(base, name)
        if not os.path.isfile(path):
            return web.Response(status=404)
        return web.FileResponse(path, headers={"Content-Disposition": f'filename="{name}"'})

    async def upload_image(self, request: web.Request) -> web.Response:
        post = await request.post()
        image = post.get("image")
        if not isinstance(image, web.FileField) or not image.filename:
            return web.Response(status=400)
        folder = self.folders.by_type(str(post.get("type") or "input"))
        kind = str(post.get("type") or "input")
        if folder is None:
            return web.Response(status=400)
        base = os.path.realpath(folder)
        subfolder = str(post.get("subfolder", ""))
        full = os.path.join(base, os.path.normpath(subfolder)) if subfolder else base
        filename = image.filename
        path = os.path.abspath(os.path.join(full, filename))
        # ComfyUI's check (the file stays in its folder), and a name with a folder in it refused too, where
        # ComfyUI would answer 500 for a folder that is not there.
        if os.path.commonpath((base, path)) != base or os.path.basename(filename) != filename:
            return web.Response(status=400)
        os.makedirs(full, exist_ok=True)
        data = image.file.read()
        if str(post.get("overwrite", "")) not in ("true", "1"):
            stem, ext = os.path.splitext(filename)
            n = 1
            # The same name with other bytes becomes "name (1).png"; the same bytes are the same upload.
            while os.path.exists(path):
                with open(path, "rb") as f:
                    if hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest():
                        return _json({"name": filename, "subfolder": subfolder, "type": kind})
                filename = f"{stem} ({n}){ext}"
                path = os.path.join(full, filename)
                n += 1
        with open(path, "wb") as f:
            f.write(data)
        return _json({"name": filename, "subfolder": subfolder, "type": kind})


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def serve_comfyui(cfg: ComfyConfig, sock: socket.socket | None = None) -> None:
    """Serve until SIGTERM or SIGINT; prints one line once it is listening, and removes its folders at the end."""
    sock = sock or bind(cfg.host, cfg.port)
    root = Path(tempfile.mkdtemp(prefix="llmgw-comfyui-")).resolve()
    server = ComfyServer(cfg, root)
    runner = web.AppRunner(server.app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    worker = asyncio.create_task(server.runner.work())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopsignals.take(loop, stop.set)
    print(f"sim-engine comfyui listening on {url(sock)}", flush=True)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        worker.cancel()
        for ws in list(server.sockets.values()):
            await ws.close()
        await runner.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    print("sim-engine comfyui stopped", file=sys.stderr, flush=True)
