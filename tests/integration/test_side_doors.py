"""No secret leaves by a side door: a provider key file that is one of llmgw's own secrets, a
provider URL at a metadata address, an engine's error text (issue 10, item 5).

Real `llmgw server` processes; the provider is a listener of the test's own that records what it
is sent, as the attacker's listener did.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_client_api import CHAT, gateway, post, provider_key  # noqa: F401  gateway: the fixture

from llmgw.store import open_store
from tests.support.waiting import wait_for

TRACE = "Traceback (most recent call last): File /srv/engine/secret_internal.py line 7"


class Listener:
    """An HTTP server on loopback that records each request's Authorization and answers as told."""

    def __init__(self, status: int = 200, message: str = ""):
        self.seen: list[str | None] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                listener.seen.append(self.headers.get("Authorization"))
                if status == 200:
                    body = {"id": "x", "object": "chat.completion", "model": "gpt", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                else:
                    body = {"error": {"message": message, "type": "server_error"}}
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def listener():
    made: list[Listener] = []

    def make(status: int = 200, message: str = "") -> Listener:
        made.append(Listener(status, message))
        return made[-1]

    yield make
    for one in made:
        one.close()


def external(url: str, **more) -> list[dict]:
    return [{"name": "gpt", "source": "external", "external": {"url": url, "allow_private_targets": True, **more}}]


def test_ctl_cannot_make_the_master_key_a_provider_key(gateway, listener):
    provider = listener()
    gw = gateway(external(provider.url))
    master_key = str(gw.data_dir / "master-key")
    done = gw.ctl("ctl", "config", "set", "models[0].external.api_key_file", master_key)
    assert done.returncode == 1
    assert f"models[0].external.api_key_file: {master_key} is one of llmgw's own secrets" in done.stderr
    assert "Traceback" not in done.stderr
    gw.openai.chat.completions.create(model="gpt", messages=CHAT, max_tokens=1)
    assert provider.seen == [None]


def test_settings_from_the_store_naming_the_master_key_never_send_it(gateway, listener):
    # As another control plane (or an older llmgw) could write them: straight into the store.
    provider = listener()
    gw = gateway(external(provider.url))
    master_key = (gw.data_dir / "master-key").read_text().strip()

    async def write() -> None:
        store = await open_store(gw.store)
        try:
            stored = await store.get_settings()
            doc = stored.doc
            doc["models"][0]["external"]["api_key_file"] = str(gw.data_dir / "master-key")
            await store.put_settings(doc, stored.version, "another control plane")
        finally:
            await store.close()

    asyncio.run(write())
    said, _ = wait_for(lambda: "the provider key file is refused" in gw.output(), timeout=15, interval=0.3)
    assert said
    status, _, body = post(gw, "/v1/chat/completions", {"model": "gpt", "messages": CHAT, "max_tokens": 1})
    assert status == 503
    assert all(master_key not in (seen or "") for seen in provider.seen)
    assert "master-key is one of llmgw's own secrets" in gw.output()
    assert master_key not in gw.output()


def test_a_provider_url_at_the_metadata_address_is_refused_by_ctl(gateway, listener):
    gw = gateway(external(listener().url))
    done = gw.ctl("ctl", "config", "set", "models[0].external.url", "http://169.254.169.254/latest/v1",
                  "models[0].external.allow_private_targets", "false")
    assert done.returncode == 1
    assert "169.254.169.254 is a cloud metadata address" in done.stderr
    assert "allow_private_targets" in done.stderr


def test_an_engines_500_text_is_not_relayed_and_its_400_text_is_trimmed(gateway, listener):
    broken = listener(500, TRACE)
    wordy = listener(400, "max_tokens is too large for this model. " + "x" * 3000)
    gw = gateway([{"name": "broken", "endpoints": [broken.url]}, {"name": "wordy", "endpoints": [wordy.url]}],
                 router={"retries": 0})
    status, _, body = post(gw, "/v1/chat/completions", {"model": "broken", "messages": CHAT})
    assert status >= 500
    assert "secret_internal" not in json.dumps(body) and "Traceback" not in json.dumps(body)
    status, _, body = post(gw, "/v1/chat/completions", {"model": "wordy", "messages": CHAT})
    assert status == 400
    assert body["error"]["message"].startswith("max_tokens is too large for this model.")
    assert len(body["error"]["message"]) <= 500
