"""A collector for the overhead bench's traces step: takes OTLP/HTTP exports on loopback, counts, keeps nothing.

The gateway under measurement sends to it as it would to a real collector
(the same exporter, the same protobuf), so what the step measures is the
gateway's whole cost of tracing; the spans themselves are only counted, to
show they were sent.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class SpanSink:
    def __init__(self) -> None:
        self.spans = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                export = ExportTraceServiceRequest.FromString(body)
                sink.spans += sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="span-sink", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def wait(self, timeout: float) -> bool:
        """Whether any span has arrived, waiting up to `timeout` seconds for the first."""
        deadline = time.monotonic() + timeout
        while not self.spans and time.monotonic() < deadline:
            time.sleep(0.05)
        return bool(self.spans)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
