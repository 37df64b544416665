"""/admin/mcp against a real `llmgw server`, driven as a browser drives it: signed in through the form, CSRF included.

One control plane and one company MCP server (tests/mcp/company.py) for the
module; each test uses servers of its own name. What the page changed is
read back with `llmgw ctl mcp list` and `ctl audit`, the same services.
"""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from tests.integration.test_mcp_gateway import Company
from tests.support.servers import Server, llmgw

pytestmark = pytest.mark.integration

PASSWORD = "a long and unguessable phrase 17"
MEMBER = "mo@example.com"
SECRET = "Bearer page-token-93c1d0"


@pytest.fixture(scope="module")
def company(tmp_path_factory):
    server = Company(tmp_path_factory.mktemp("company"), "co")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("gw"), "gw")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.administrator = json.loads(done.stdout)["administrator"]
    server.start()
    added = llmgw("people", "add", MEMBER, "--name", "Mo", "--password-stdin", "--admin", server.admin,
                  "--token-file", server.token_file, stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    yield server
    server.stop()


class Browser:
    """A signed-in person's cookies, and the CSRF value their pages carry."""

    def __init__(self, http: aiohttp.ClientSession, csrf: str):
        self.http, self.csrf = http, csrf

    async def page(self, path: str = "/admin/mcp") -> tuple[int, str]:
        async with self.http.get(path) as answer:
            return answer.status, await answer.text()

    async def post(self, path: str, **fields: str) -> tuple[int, str]:
        async with self.http.post(path, data={"_csrf": self.csrf, **fields}) as answer:
            return answer.status, await answer.text()


async def signed_in(gw, email: str, password: str) -> Browser:
    http = aiohttp.ClientSession(gw.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with http.get("/signin") as page:
        csrf = _csrf(await page.text())
    async with http.post("/signin", data={"_csrf": csrf, "email": email, "password": password},
                         allow_redirects=False) as signed:
        assert signed.status == 303, await signed.text()
    async with http.get("/profile") as page:
        return Browser(http, _csrf(await page.text()))


def _csrf(html: str) -> str:
    found = re.search(r'name="_csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
async def admin(gw):
    browser = await signed_in(gw, gw.administrator["email"], gw.administrator["password"])
    yield browser
    await browser.http.close()


def listed(gw) -> dict[str, dict]:
    return {s["name"]: s for s in gw.ctl_json("ctl", "mcp", "list")}


async def test_a_server_added_on_the_page_is_listed_its_secret_sealed_and_never_shown_nor_audited(gw, admin, company):
    status, html = await admin.post("/admin/mcp/add", name="acme", url=company.url, description="Acme tickets",
                                    allow_private="1", secret_header="Authorization", secret_value=SECRET,
                                    headers="X-Team: support", timeout="30", rate="5")

    assert status == 200 and "The MCP server acme was added." in html, text_of(html)
    row = text_of(html[html.index('id="mcp-acme"'):])
    assert "Acme tickets" in row and company.url in row and "Authorization (sealed)" in row and "X-Team" in row
    assert SECRET not in html
    server = listed(gw)["acme"]
    assert server["secret_headers"] == ["Authorization"] and server["timeout"] == 30 and server["rate"] == 5
    audit = gw.ctl_json("ctl", "audit", "--target", "acme")
    assert [(e["action"], e["actor"], e["via"]) for e in audit] == [
        ("mcp.server.add", gw.administrator["email"], "portal")]
    assert SECRET not in json.dumps(audit)
    assert SECRET not in gw.ctl("ctl", "audit", "--limit", "200").stdout


async def test_a_loopback_address_without_allow_private_is_refused_with_its_sentence(gw, admin, company):
    status, html = await admin.post("/admin/mcp/add", name="local", url=company.url, secret_header="Authorization",
                                    secret_value=SECRET)

    assert status == 400
    said = text_of(html)
    assert "loopback" in said and "--allow-private" in said
    assert 'value="local"' in html and SECRET not in html  # the form kept, but never the secret typed
    assert "local" not in listed(gw)


async def test_a_name_already_taken_is_refused_with_its_sentence(gw, admin):
    assert gw.ctl("ctl", "mcp", "add", "taken", "--url", "llmgw:admin").returncode == 0

    status, html = await admin.post("/admin/mcp/add", name="taken", url="llmgw:admin")

    assert status == 409 and "there is already an MCP server named taken" in text_of(html)


async def test_testing_a_server_lists_its_tools_or_says_why_not(gw, admin, company):
    assert gw.ctl("ctl", "mcp", "add", "tools", "--url", company.url, "--allow-private").returncode == 0
    assert gw.ctl("ctl", "mcp", "add", "unset", "--url", company.url, "--allow-private",
                  "--header-ref", "Authorization=env:LLMGW_TEST_UNSET_TOKEN").returncode == 0

    status, html = await admin.post("/admin/mcp/tools/test")
    _, failed = await admin.post("/admin/mcp/unset/test")

    assert status == 200
    tested = text_of(html[html.index('id="tested"'):html.index("</section>")])
    assert "tools.echo" in tested and "tools.ticket" in tested and "tools.steps" in tested
    assert "LLMGW_TEST_UNSET_TOKEN" in text_of(failed[failed.index('id="tested"'):])

    async def counted() -> bool:
        _, page = await admin.page()
        return re.search(r'id="mcp-tools".*?<td class="number">\s*3\s*</td>', page, re.S) is not None

    for _ in range(200):  # the gateway reads a new server's tools within a moment of being told
        if await counted():
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the list never showed the tools server's 3 tools")


async def test_a_server_disabled_on_the_page_is_disabled_for_the_gateway_and_enabled_again(gw, admin):
    assert gw.ctl("ctl", "mcp", "add", "toggled", "--url", "llmgw:admin").returncode == 0

    status, html = await admin.post("/admin/mcp/toggled/disable", disabled="1")

    assert status == 200 and "The MCP server toggled is disabled" in html
    assert "disabled" in text_of(html[html.index('id="mcp-toggled"'):].split("</tr>")[0])
    assert listed(gw)["toggled"]["disabled"] is True
    status, html = await admin.post("/admin/mcp/toggled/disable", disabled="0")
    assert "The MCP server toggled is enabled again." in html and listed(gw)["toggled"]["disabled"] is False
    actions = [e["action"] for e in gw.ctl_json("ctl", "audit", "--target", "toggled")]
    assert actions.count("mcp.server.update") == 2


async def test_a_server_removed_on_the_page_is_gone_and_removing_it_again_says_so(gw, admin):
    assert gw.ctl("ctl", "mcp", "add", "gone", "--url", "llmgw:admin").returncode == 0

    status, html = await admin.post("/admin/mcp/gone/remove")

    assert status == 200 and "The MCP server gone was removed." in html and 'id="mcp-gone"' not in html
    assert "gone" not in listed(gw)
    _, again = await admin.post("/admin/mcp/gone/remove")
    assert "there is no MCP server named gone" in text_of(again)
    assert "mcp.server.remove" in [e["action"] for e in gw.ctl_json("ctl", "audit", "--target", "gone")]


async def test_a_member_is_refused_the_page_and_its_forms(gw, company):
    member = await signed_in(gw, MEMBER, PASSWORD)
    try:
        status, _ = await member.page()
        posted, _ = await member.post("/admin/mcp/add", name="sneaky", url="llmgw:admin")
    finally:
        await member.http.close()

    assert status == 403 and posted == 403 and "sneaky" not in listed(gw)
