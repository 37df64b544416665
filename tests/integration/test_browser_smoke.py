"""A real headless Chromium against a real `llmgw server`, before any portal page exists.

These are sync tests on purpose: playwright's sync API will not start inside
a running asyncio loop, and pytest-asyncio puts only `async def` tests on one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web

from tests.support.pgcluster import free_port
from tests.support.servers import serving_with_first_key, write_config

pytestmark = pytest.mark.slow  # a real Chromium


def test_the_browser_shows_the_gateways_health_and_its_models_as_json_text(servers, engines, browsing, tmp_path):
    engine = engines("qwen")
    config = write_config(tmp_path / "gw.yaml", {"models": [{"name": "qwen", "endpoints": [engine.url]}]})
    gw = serving_with_first_key(servers("gw", config=config))
    page = browsing.page

    shown = page.goto(gw.client_url + "/health")
    assert shown.status == 200
    assert json.loads(page.inner_text("body")) == {"status": "ok"}

    page.set_extra_http_headers({"Authorization": f"Bearer {gw.key}"})
    shown = page.goto(gw.client_url + "/v1/models")
    assert shown.status == 200
    assert [m["id"] for m in json.loads(page.inner_text("body"))["data"]] == ["qwen"]
    assert browsing.screenshot("v1-models").stat().st_size > 0


NONCE = "bm9uY2UtZm9yLXRoZS10ZXN0"

# What the portal's pages will send (plan §6, Part 3): scripts only from the
# gateway itself or with this response's nonce, and no inline handlers.
POLICY = (f"default-src 'self'; script-src 'self' 'nonce-{NONCE}'; object-src 'none'; base-uri 'none'; "
          "frame-ancestors 'none'; form-action 'self'")

PAGE = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>CSP</title></head><body>
<p id="with-nonce">did not run</p>
<p id="without-nonce">did not run</p>
<p id="handler">did not run</p>
<button id="press" onclick="document.getElementById('handler').textContent = 'ran'">press</button>
<script nonce="{NONCE}">document.getElementById("with-nonce").textContent = "ran";</script>
<script>document.getElementById("without-nonce").textContent = "ran";</script>
</body></html>"""


@pytest.fixture
def csp_site() -> Iterator[str]:
    """A tiny aiohttp app serving PAGE under POLICY on loopback; yields its address.

    It runs on a loop in a thread of its own: in this thread playwright's sync
    API keeps its own loop marked as running, and asyncio allows one a thread.
    """

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", headers={"Content-Security-Policy": POLICY})

    port = free_port()
    loop = asyncio.new_event_loop()
    listening = threading.Event()
    stop = asyncio.Event()

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/", page)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        listening.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert listening.wait(timeout=10), "the CSP test's aiohttp app did not start listening in 10 s"
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


def test_the_browser_runs_only_the_inline_script_that_carries_the_policys_nonce(csp_site, browsing):
    page = browsing.page
    page.goto(csp_site)
    page.click("#press")
    assert page.inner_text("#with-nonce") == "ran"
    assert page.inner_text("#without-nonce") == "did not run"
    assert page.inner_text("#handler") == "did not run"
    page.wait_for_function("() => (window.__llmgwViolations || []).length >= 2")
    refused = browsing.take_violations()
    assert sorted(said.split(" refused ")[0] for said in refused) == ["script-src-attr", "script-src-elem"]
    browsing.screenshot("csp")
