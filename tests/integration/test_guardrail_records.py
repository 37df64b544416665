"""What is kept of a guardrail's block, as an administrator looks for it on a real server (issue 25, item 9).

A newcomer's two `secrets:github` blocks were in no record: the Guardrails
page said no rule had acted, `ctl request ID` showed no decision, and the
usage rows named no model.
"""

from __future__ import annotations

import json
import re
import urllib.request

import aiohttp
import openai
import pytest

from tests.support.servers import llmgw, serving_with_first_key, write_config
from tests.support.waiting import wait_until

# A GitHub token's shape (ghp_ and 36 letters and digits): what the baseline's secrets rule refuses.
TOKEN = "ghp_" + "Zq4Lm8Rt2Wx6Yb0Nc3Vd7Hf1Jk5Pa9Se2UgT7"
PASSWORD = "correct horse battery"


@pytest.fixture
def cluster(servers, engines, tmp_path):
    """A cluster as `server init` makes it (the baseline on every request) before a sim-engine."""
    engine = engines("qwen", "--echo")
    return serving_with_first_key(servers("gw", config=write_config(
        tmp_path / "server.yaml", {"models": [{"name": "qwen", "endpoints": [engine.url]}]})))


def _blocked(gw) -> str:
    """A prompt carrying a GitHub token, refused; the request id the refusal gave."""
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(
            model="qwen", messages=[{"role": "user", "content": f"clone it with {TOKEN} please"}])
    assert refused.value.body["code"] == "guardrail_blocked"
    assert "secrets:github" in refused.value.body["message"]
    return refused.value.response.headers["x-request-id"]


def _row(gw, request_id: str) -> dict | None:
    done = gw.ctl("ctl", "request", request_id, "--json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_a_blocked_prompt_is_recorded_with_its_rule_and_model_never_its_text(cluster):
    request_id = _blocked(cluster)

    row = wait_until(lambda: _row(cluster, request_id), 10, "the blocked request's usage row was written")
    assert row["model"] == "qwen"
    assert row["status"] == 400
    assert {"rule": "secrets:github", "action": "block", "direction": "input"} in row["detail"]["guard"]
    assert TOKEN not in json.dumps(row)
    shown = cluster.ctl("ctl", "request", request_id)
    assert shown.returncode == 0, shown.stderr
    assert "secrets:github" in shown.stdout and "qwen" in shown.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports['metrics']}/metrics", timeout=5) as r:
        counted = [line for line in r.read().decode().splitlines()
                   if line.startswith("llmgw_guard_decisions{") and 'rule="secrets:github"' in line
                   and 'action="block"' in line]
    assert counted and float(counted[0].split()[-1]) == 1

async def test_the_guardrails_page_shows_a_block_with_its_model(cluster):
    request_id = _blocked(cluster)
    wait_until(lambda: _row(cluster, request_id), 10, "the blocked request's usage row was written")
    added = llmgw("people", "add", "otto@example.com", "--name", "Otto", "--role", "operator", "--password-stdin",
                  "--admin", cluster.admin, "--token-file", cluster.token_file, stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr

    # unsafe: the cookie jar takes cookies from an address (127.0.0.1), as a browser does.
    async with aiohttp.ClientSession(base_url=cluster.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        form = await (await browser.get("/signin")).text()
        csrf = re.search(r'name="_csrf" value="([^"]+)"', form).group(1)
        signed = await browser.post("/signin", data={"_csrf": csrf, "email": "otto@example.com",
                                                     "password": PASSWORD, "next": "/"}, allow_redirects=False)
        assert signed.status == 303
        page = await (await browser.get("/admin/guardrails")).text()

    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert "No rule has acted on a request yet" not in text
    assert "secrets:github block prompt qwen" in text
    assert request_id in text
    assert TOKEN not in page
