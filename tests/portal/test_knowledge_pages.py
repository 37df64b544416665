"""/admin/kb, /knowledge and the chat's picker, against a real `llmgw server` and an echoing sim-engine.

The pages are driven as a browser drives them (signed in through the form,
CSRF included); what they changed is read back with `llmgw ctl kb` and
`ctl audit`, the same service. The chat's picker, in a real Chromium, is
test_knowledge_chat_browser.py's.
"""

from __future__ import annotations

import json

import pytest

from tests.portal.test_admin_mcp_page import signed_in, text_of
from tests.support.servers import Server, SimEngine, llmgw, write_config

pytestmark = pytest.mark.integration

PASSWORD = "a long and unguessable phrase 17"
MEMBER = "mo@example.com"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("kb-pages")
    engine = SimEngine(root, "qwen", "--echo").start()
    server = Server(root, "gw", config=write_config(root / "gw.yaml", {
        "models": [{"name": "qwen", "endpoints": [engine.url]}],
        "router": {"knowledge": {"embedding_model": "qwen"}}}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    server.administrator, server.first_key = made["administrator"], made["key"]
    server.start()
    for project in ("Acme/Support/Helpdesk", "Acme/Sales/Deals", "Rival/Ops/Pager"):
        server.ctl_json("keys", "create", "--project", project, "--create", project.rsplit("/", 1)[1].lower())
    added = llmgw("people", "add", MEMBER, "--name", "Mo", "--password-stdin", "--member-of",
                  "project:Acme/Support/Helpdesk", "--admin", server.admin, "--token-file", server.token_file,
                  stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    yield server
    server.stop()
    engine.stop()


@pytest.fixture
async def admin(gw):
    browser = await signed_in(gw, gw.administrator["email"], gw.administrator["password"])
    yield browser
    await browser.http.close()


@pytest.fixture
async def member(gw):
    browser = await signed_in(gw, MEMBER, PASSWORD)
    yield browser
    await browser.http.close()


def bases(gw) -> dict[str, dict]:
    return {b["name"]: b for b in gw.ctl_json("ctl", "kb", "list")}


async def test_a_base_made_on_the_page_is_given_taken_back_and_deleted_each_audited_under_the_admin(gw, admin):
    status, html = await admin.post("/admin/kb/create", name="handbook", scope="project",
                                    place="Acme/Support/Helpdesk", embedding_model="")

    assert status == 200 and "The knowledge base handbook was made." in text_of(html), text_of(html)
    made = bases(gw)["handbook"]
    assert made["owner"] == {"scope": "project", "place": "Acme/Support/Helpdesk"}
    assert made["embedding_model"] == "qwen", "router.knowledge.embedding_model, the form's field left empty"
    assert made["id"] in html and "llmgw-kb sync FOLDER --kb " + made["id"] in text_of(html)

    status, html = await admin.post(f"/admin/kb/{made['id']}/grant", scope="project", place="Acme/Sales/Deals",
                                    access="read")
    assert status == 200 and "It was given to Acme/Sales/Deals." in text_of(html)
    assert gw.ctl_json("ctl", "kb", "show", made["id"])["grants"][0]["place"] == "Acme/Sales/Deals"

    status, html = await admin.post(f"/admin/kb/{made['id']}/revoke", scope="project", place="Acme/Sales/Deals")
    assert status == 200 and "It was taken back from Acme/Sales/Deals." in text_of(html)
    assert gw.ctl_json("ctl", "kb", "show", made["id"])["grants"] == []

    status, html = await admin.post(f"/admin/kb/{made['id']}/delete")
    assert status == 200 and "The knowledge base handbook and its passages were deleted." in text_of(html)
    assert "handbook" not in bases(gw)
    audit = gw.ctl_json("ctl", "audit", "--target", f"kb:{made['id']}")
    assert sorted((e["action"], e["actor"], e["via"]) for e in audit) == sorted(
        (action, gw.administrator["email"], "portal") for action in ("kb.create", "kb.grant", "kb.revoke",
                                                                     "kb.delete"))


async def test_a_place_there_is_not_is_refused_with_its_sentence_and_the_form_kept(gw, admin):
    status, html = await admin.post("/admin/kb/create", name="nowhere docs", scope="team", place="No/Such",
                                    embedding_model="qwen")

    assert status == 404 and "there is no team No/Such" in text_of(html)
    assert 'value="nowhere docs"' in html and "nowhere docs" not in bases(gw)
    status, html = await admin.page("/admin/kb/vs_" + "x" * 24)
    assert status == 404 and "there is no knowledge base" in text_of(html)


async def test_a_member_sees_the_bases_of_their_projects_and_none_of_the_admin_pages(gw, member):
    ours = gw.ctl_json("ctl", "kb", "create", "support handbook", "--team", "Acme/Support")
    theirs = gw.ctl_json("ctl", "kb", "create", "pager notes", "--project", "Rival/Ops/Pager")

    status, html = await member.page("/knowledge")

    assert status == 200
    said = text_of(html)
    assert "Acme/Support/Helpdesk" in said and "support handbook" in said and ours["id"] in html
    assert "pager notes" not in said and theirs["id"] not in html
    status, _ = await member.page("/admin/kb")
    assert status == 403
    status, _ = await member.page(f"/admin/kb/{theirs['id']}")
    assert status == 403
