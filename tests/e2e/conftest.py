"""The portal end to end: a real `llmgw server` and sim engine, driven by a real Chromium.

One gateway serves a whole test module (starting one costs seconds, and the
journeys share nothing a test could trip over: each makes its own keys and
places). Its model `qwen` is priced at 1.00 a thousand answer tokens, so a
10-token answer costs 0.01 and a budget of a few cents is spent in a few
requests. People: the first administrator that `server init` made, and a
member added with `llmgw people add`, both in the project Acme/web/app.

A test signs in once per module and person (`signed_in`) and opens pages
with that session's cookie in a context of its own (`pages`), in any
language and with or without JavaScript; every context reports
Content-Security-Policy violations, and one that reports any fails its test,
as the `browsing` fixture does (tests/support/browser.py).

Screenshots go to `--screenshots DIR`, else `$LLMGW_E2E_OUT`, else
var/e2e/<test>/<page>.png in the checkout (var/ is not in git). With
LLMGW_E2E_DOCS_IMG=1 the screenshot test also writes docs/img/portal-*.png.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.browser import FAILED, REPORT_VIOLATIONS, Browsing, safe_name
from tests.support.servers import Server, SimEngine, llmgw, write_config

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

PROJECT = "Acme/web/app"
MEMBER = {"email": "mo@example.com", "name": "Mo Member", "password": "a long and unguessable phrase 93"}
# 1.00 (a million micro-units) a thousand answer tokens: a 10-token answer costs 0.01.
PRICE = {"completion_per_1k": 1_000_000}
MODEL = "qwen"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)  # a real Chromium through the portal's journeys


@pytest.fixture
def screenshots(request) -> Path:
    """This test's screenshot folder: --screenshots DIR, $LLMGW_E2E_OUT or var/e2e, then /<test>."""
    chosen = (request.config.getoption("--screenshots") or os.environ.get("LLMGW_E2E_OUT")
              or str(ROOT / "var" / "e2e"))
    folder = Path(chosen) / safe_name(request.node.name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Gateway:
    server: Server
    engine: SimEngine
    admin: dict  # email and password of the first administrator
    member: dict

    @property
    def url(self) -> str:
        return self.server.client_url

    def people(self, *args: str, stdin: str | None = None) -> dict:
        done = llmgw("people", *args, "--admin", self.server.admin, "--token-file", self.server.token_file,
                     "--json", stdin=stdin)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def gateway(request, tmp_path_factory) -> Iterator[Gateway]:
    """The module's gateway; a module that sets GATEWAY_PRICE serves MODEL at that price (None: no price)."""
    root = tmp_path_factory.mktemp("e2e")
    engine = SimEngine(root, MODEL).start()
    price = getattr(request.module, "GATEWAY_PRICE", PRICE)
    server = Server(root, "gw", config=write_config(root / "gw.yaml", {"models": [
        {"name": MODEL, "endpoints": [engine.url], **({"price": price} if price else {})}]}))
    try:
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.start()
        gw = Gateway(server, engine, json.loads(done.stdout)["administrator"], MEMBER)
        for kind, path in (("org", "Acme"), ("team", "Acme/web"), ("project", PROJECT)):
            server.ctl_json("ctl", "tree", "add", kind, path)
        gw.people("join", gw.admin["email"], f"project:{PROJECT}")
        gw.people("add", MEMBER["email"], "--name", MEMBER["name"], "--member-of", f"project:{PROJECT}",
                  "--password-stdin", stdin=MEMBER["password"] + "\n")
        yield gw
    finally:
        server.stop()
        engine.stop()


def sign_in(page, url: str, who: dict) -> None:
    """Signs in through the sign-in form, as a person would, and waits for the page it leads to."""
    page.goto(url + "/signin")
    page.fill("#email", who["email"])
    page.fill("#password", who["password"])
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert "/signin" not in page.url, page.inner_text("body")


@pytest.fixture(scope="module")
def signed_in(browser, gateway) -> Callable[[str], list[dict]]:
    """signed_in("admin" | "member"): that person's session cookies, signing in once a module."""
    made: dict[str, list[dict]] = {}

    def cookies(who: str) -> list[dict]:
        if who not in made:
            context = browser.new_context(locale="en-US")
            try:
                sign_in(context.new_page(), gateway.url, getattr(gateway, who))
                made[who] = context.cookies()
            finally:
                context.close()
        return made[who]

    return cookies


@pytest.fixture
def pages(request, browser, signed_in, screenshots) -> Iterator[Callable[..., Browsing]]:
    """pages(who=None, locale="en-US", javascript=True): a page in a new context, signed in as `who`.

    Each context reports CSP violations; any left untaken fails the test at its end. A failed test leaves
    what each page showed then as at-failure-<n>.png.
    """
    opened: list[tuple[object, Browsing]] = []

    def open_page(who: str | None = None, *, locale: str = "en-US", javascript: bool = True) -> Browsing:
        context = browser.new_context(locale=locale, java_script_enabled=javascript)
        seen = Browsing(page=None, shots=screenshots)
        context.expose_binding("llmgwViolation", lambda _source, said: seen.violations.append(said))
        context.add_init_script(REPORT_VIOLATIONS)
        if who:
            context.add_cookies(signed_in(who))
        seen.page = context.new_page()
        opened.append((context, seen))
        return seen

    yield open_page
    left: list[str] = []
    for n, (context, seen) in enumerate(opened):
        try:
            if request.node.stash.get(FAILED, False):
                seen.screenshot(f"at-failure-{n}")
            seen.flush()
        except Exception:  # noqa: BLE001 - a page that crashed or was closed has nothing more to show or report
            pass
        left += seen.violations
        context.close()
    if left:
        pytest.fail("the page broke its Content-Security-Policy: " + "; ".join(left), pytrace=False)
