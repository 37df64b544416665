"""An engine that keeps every request body it is sent, to show what reached it.

The sim-engine's --echo shows the last user message only; a test of what
the gateway lets through needs the whole body (tools, names, suffixes).
This one answers chat, completions and embeddings with a fixed "ok", on
loopback, from a thread of the test's own process.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # /metrics, /health: nothing to report
                self._send(200, b"", "text/plain")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                recorder.bodies.append(body)
                if self.path.endswith("/embeddings"):
                    answer = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}],
                              "model": body.get("model"), "usage": USAGE}
                elif self.path.endswith("/completions") and not self.path.endswith("/chat/completions"):
                    answer = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body.get("model"),
                              "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}], "usage": USAGE}
                else:
                    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                           "finish_reason": "stop"}], "usage": USAGE}
                self._send(200, json.dumps(answer).encode(), "application/json")

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def saw(self, text: str) -> bool:
        """Whether `text` was anywhere in anything the engine was sent."""
        return any(text in json.dumps(b, ensure_ascii=False) for b in self.bodies)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
