"""An OTLP/HTTP trace receiver on loopback, as an OpenTelemetry collector is: what llmgw's exports hold.

An aiohttp server on a thread of its own, taking POST /v1/traces with
protobuf bodies and decoding them with opentelemetry-proto's own classes;
every span is kept whole (name, ids, attributes, events, its service) for
the test to read, and for the scan that no span holds a prompt's words.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status_message: str = ""

    def texts(self) -> list[str]:
        """Every string the span carries: its name, status, attributes' keys and values, its events'."""
        said = [self.name, self.status_message, self.service]
        for key, value in self.attributes.items():
            said += [key, str(value)]
        for name, attributes in self.events:
            said.append(name)
            for key, value in attributes.items():
                said += [key, str(value)]
        return said


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="otlp-receiver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the OTLP receiver did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    async def _traces(self, request: web.Request) -> web.Response:
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415)
        export = ExportTraceServiceRequest.FromString(await request.read())
        got = []
        for resource_spans in export.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    got.append(ReceivedSpan(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), service=str(resource.get("service.name", "")),
                        kind=s.kind, attributes={kv.key: _value(kv.value) for kv in s.attributes},
                        events=[(e.name, {kv.key: _value(kv.value) for kv in e.attributes}) for e in s.events],
                        status_message=s.status.message))
        with self._lock:
            self.spans += got
            self.posts += 1
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, found, timeout: float = 20.0, what: str = "spans"):
        """Poll until `found(spans)` is truthy, and return it."""
        deadline = time.monotonic() + timeout
        while True:
            result = found(self.received())
            if result:
                return result
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.received()})
                raise AssertionError(f"the receiver did not get {what} in {timeout:g} s; it has: {names}")
            time.sleep(0.05)

    def close(self) -> None:
        async def stop() -> None:
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
