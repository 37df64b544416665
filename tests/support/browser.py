"""A real headless Chromium for the tests, driven by playwright's sync API.

The browser is Debian's `chromium` package, never one that playwright
downloads: CI and the developers' machines reach Debian's archive and PyPI
only, and `playwright install` would fetch a browser build from elsewhere.
playwright's Python package (setup.cfg's [test] extra) brings its own
driver and talks to the installed Chromium over the DevTools protocol.

The tests that use it are sync functions: pytest-asyncio runs only `async
def` tests on its loop, and playwright's sync API refuses to start inside a
running loop. One browser serves a test module (a launch costs about a
second; `browser` says why not the session); each test gets a context of its
own (cookies, storage and cache start empty) with one page in it.

Without chromium or playwright the tests fail, never skip, naming what to
install: a suite that skips its browser tests passes while the portal's
pages go unseen, as tests/conftest.py says of PostgreSQL.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# CI runs as root, where Chromium's sandbox will not start; /dev/shm in a
# container is often 64 MB, which a page's renderer outgrows.
LAUNCH_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]

# Reports every Content-Security-Policy violation to the test. playwright
# adds init scripts through DevTools, outside the page's own policy, so this
# runs on a page whose policy forbids every inline script. A test that
# means to provoke a violation takes it with Browsing.take_violations();
# any other fails the test at teardown.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  const said = `${e.effectiveDirective} refused ${e.blockedURI || "inline"} on ${e.documentURI}`;
  (window.__llmgwViolations = window.__llmgwViolations || []).push(said);
  window.llmgwViolation(said);
}, true);
"""


# Set on a test whose body failed, so that `browsing` keeps a picture of what the page showed then.
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


def pytest_addoption(parser):
    parser.addoption("--screenshots", metavar="DIR", default=None,
                     help="write the browser tests' screenshots under DIR/<test>/ (default: each test's tmp_path)")


def safe_name(name: str) -> str:
    """NAME as one file name: a parametrized test's [brackets] and spaces become dashes."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


def chromium_path() -> str:
    """LLMGW_CHROMIUM, else Debian's chromium-headless-shell, else its chromium; a failure naming the package.

    The headless shell first: the same Blink and V8, without the full
    browser around them, as playwright itself runs headless Chromium. Measured
    on two cores, 15 fresh contexts cost 1.5 s of CPU against chromium's 5.5,
    and 15 full-page screenshots 10.5 s against 22; the browser tests spent
    some 300 s of the suite's CPU in chromium.
    """
    path = (os.environ.get("LLMGW_CHROMIUM") or shutil.which("chromium-headless-shell")
            or shutil.which("chromium"))
    if not path:
        pytest.fail("the browser tests need Chromium, and there is neither `chromium-headless-shell` nor "
                    "`chromium` on PATH: install Debian's with `apt-get install chromium-headless-shell "
                    "fonts-dejavu-core` as root (`build.py test` does, as root), or name another Chromium in "
                    "LLMGW_CHROMIUM", pytrace=False)
    return path


@pytest.fixture(scope="module")
def browser(request):
    """One headless Chromium for a test module, closed at its end.

    Not one for the session: while playwright's sync API is started it keeps
    its loop marked as running in this thread, so every `async def` test
    after it would fail with "Cannot run the event loop while another loop is
    running". Closed at the module's end, it leaves the thread as it found it;
    a module that drives the browser therefore holds sync tests only.
    """
    asynchronous = sorted(name for name, value in vars(request.module).items()
                          if name.startswith("test") and inspect.iscoroutinefunction(value))
    if asynchronous:
        pytest.fail(f"{request.module.__name__} drives the browser and also has async tests "
                    f"({', '.join(asynchronous)}), which cannot run while playwright's sync API holds this "
                    "thread's loop: move them to a module of their own", pytrace=False)
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None:  # failed outside the except, so the report is the sentence alone
        pytest.fail("the browser tests need playwright's Python package, which is not installed: "
                    "`python3 build.py test` installs setup.cfg's [test] extra, which pins it", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        yield launched
        launched.close()


@dataclass
class Browsing:
    """One test's page, the CSP violations it reported, and where its screenshots go."""

    page: Any
    shots: Path
    violations: list[str] = field(default_factory=list)

    def screenshot(self, name: str) -> Path:
        """The whole page as shots/NAME.png."""
        path = self.shots / f"{safe_name(name)}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def take_violations(self) -> list[str]:
        """The violations reported so far, which the test thereby expected; later ones still fail it."""
        self.flush()
        taken, self.violations[:] = list(self.violations), []
        return taken

    def flush(self) -> None:
        """Deliver the reports still on their way: the page's calls reach Python before this round trip's answer."""
        self.page.evaluate("0")


@pytest.fixture
def screenshots(request, tmp_path) -> Path:
    """This test's screenshot folder: --screenshots DIR/<test>, or tmp_path/screenshots."""
    chosen = request.config.getoption("--screenshots")
    folder = Path(chosen) / safe_name(request.node.name) if chosen else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browsing(request, browser, screenshots):
    """A fresh browser context and page for one test; a CSP violation it did not take fails it.

    A test that fails leaves the page as it was then in its screenshots folder, as at-failure.png.
    """
    context = browser.new_context(locale="en-US")
    seen = Browsing(page=None, shots=screenshots)
    context.expose_binding("llmgwViolation", lambda _source, said: seen.violations.append(said))
    context.add_init_script(REPORT_VIOLATIONS)
    seen.page = context.new_page()
    yield seen
    try:
        if request.node.stash.get(FAILED, False):
            seen.screenshot("at-failure")
        seen.flush()
    except Exception:  # noqa: BLE001 - a page that crashed or was closed by the test has nothing more to show
        pass
    left = list(seen.violations)
    context.close()
    if left:
        pytest.fail("the page broke its Content-Security-Policy: " + "; ".join(left), pytrace=False)
