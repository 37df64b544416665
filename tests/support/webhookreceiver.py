"""A webhook's receiver on loopback (aiohttp): it records what it is sent and answers as the test says;
and the verifying snippet of docs/webhooks.md, as a reader would copy it."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

DOCS = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def docs_verify():
    """The `verify` of docs/webhooks.md, run as a reader would copy it."""
    snippet = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert snippet is not None, "docs/webhooks.md lost its verifying snippet"
    scope: dict = {}
    exec(snippet.group(1), scope)  # noqa: S102 - our own documentation's code, the point of the test
    return scope["verify"]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def doc(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers `failing` requests with 503, then 200; `got` is every request, in order."""

    failing: int = 0
    got: list[Received] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            status = 503 if self.failing > 0 else 200
            self.failing -= status == 503
            self.got.append(Received(dict(request.headers), body, status))
        return web.Response(status=status, text="ok" if status == 200 else "not now")

    def taken(self) -> list[Received]:
        return [r for r in self.got if r.status == 200]

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return runner


class ReceiverThread:
    """A Receiver served from a thread of its own, for tests that wait on processes rather than await."""

    def __init__(self, receiver: Receiver) -> None:
        import asyncio

        self.receiver = receiver
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-receiver", daemon=True)

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        self._runner = self._loop.run_until_complete(self.receiver.start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> Receiver:
        self._thread.start()
        self._ready.wait(10)
        return self.receiver

    def __exit__(self, *exc) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
