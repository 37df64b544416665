"""The coding agents the portal's Connect page has snippets for, run for real: Codex CLI and Claude Code.

Both come from npm, at the versions tests/support/editors/package-lock.json
pins, installed by `npm ci --prefix tests/support/editors` (`build.py test` does
it; so does the first test that needs them, under a lock, on a fresh
clone). Each ships its program as a native binary in an optional
dependency for the platform (@openai/codex-linux-x64,
@anthropic-ai/claude-code-linux-x64), so nothing is fetched at run time and
neither needs a login: Codex reads its key from the variable its config
names, Claude Code from ANTHROPIC_AUTH_TOKEN.

Each is configured with nothing but the snippet the Connect page shows,
read from the page a signed-in person gets from the real server: the test
configures the program the way a person following the page would.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import aiohttp

from tests.portal.members import Text

HERE = Path(__file__).parent / "editors"
BIN = HERE / "node_modules" / ".bin"
CODEX = BIN / "codex"
CLAUDE = BIN / "claude"


def ensure_installed() -> None:
    """codex and claude in tests/support/editors/node_modules, installed once (under a lock) when missing."""
    if CODEX.exists() and CLAUDE.exists():
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("node and npm are needed for the coding agents the tests run: apt-get install nodejs npm")
    with open(HERE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (CODEX.exists() and CLAUDE.exists()):
            done = subprocess.run([npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund"],
                                  capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"npm install of Codex CLI and Claude Code failed:\n{done.stdout}\n{done.stderr}")


async def connect_snippet(base: str, email: str, password: str, tool: str, model: str) -> str:
    """The first snippet the Connect page shows for `tool` and `model`, as text, to someone signed in at `base`."""
    async with aiohttp.ClientSession(base, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get("/signin") as page:
            csrf = _csrf(await page.text())
        async with http.post("/signin", data={"_csrf": csrf, "email": email, "password": password},
                             allow_redirects=False) as signed:
            assert signed.status == 303, await signed.text()
        async with http.get("/connect", params={"tool": tool, "model": model}) as page:
            assert page.status == 200, await page.text()
            return Text(await page.text()).by_id["snippet-1"]


def _csrf(page: str) -> str:
    found = re.search(r'name="_csrf" value="([^"]+)"', page)
    assert found, "the sign-in page has no CSRF field"
    return found.group(1)


def environment(home: Path, key: str) -> dict[str, str]:
    """A person's shell with only a home of its own and the key exported, as the Connect page's first step says."""
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "LLMGW_API_KEY": key, "TERM": "dumb", "NO_COLOR": "1"}
