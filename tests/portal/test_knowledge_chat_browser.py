"""The chat's knowledge-base picker in a real Chromium, against a real `llmgw server` and an echoing sim-engine.

The engine echoes the question, so "Say [1]." comes back citing passage 1 of
the chosen base, and the page names the file the answer came from, read from
the streamed answer's last chunk (router/citing.py). Every test also fails on
a Content-Security-Policy violation (tests/support/browser.py).
"""

from __future__ import annotations

import io

import openai
import pytest

from tests.portal.test_chat_browser import open_chat
from tests.portal.test_knowledge_pages import gw  # noqa: F401 - the module's own server, as that module's

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium

PORTS = "# Ports\n\nThe admin API listens on port 9090 of loopback, and `llmgw ctl` calls it there.\n"


def test_the_chat_answers_from_a_chosen_base_and_names_the_file_it_came_from(gw, browsing):
    project = gw.first_key["project"]
    made = gw.ctl_json("ctl", "kb", "create", "ports", "--project", project)
    client = openai.OpenAI(api_key=gw.first_key["key"], base_url=gw.client_url + "/v1", max_retries=0)
    uploaded = client.files.create(file=("ports.md", io.BytesIO(PORTS.encode())), purpose="assistants")
    client.vector_stores.files.create_and_poll(uploaded.id, vector_store_id=made["id"], poll_interval_ms=100)
    page = open_chat(gw, browsing)  # signed in as the first administrator, a member of the key's project

    page.check(f"input[name=knowledge-base][value={made['id']}]")
    page.fill("#chat-input", "Which port does the admin API listen on? Say [1].")
    page.click("#chat-send")
    page.wait_for_selector(".message.assistant .sources", timeout=30_000)

    assert page.inner_text(".message.assistant .sources") == "Sources: ports.md"
    assert "[1]" in page.inner_text(".message.assistant .body")
    page.uncheck(f"input[name=knowledge-base][value={made['id']}]")
    page.fill("#chat-input", "And without it? Say [1].")
    page.click("#chat-send")
    page.wait_for_selector("#chat-send", state="visible", timeout=30_000)
    page.wait_for_function("() => document.querySelectorAll('.message.assistant').length === 2")
    assert page.locator(".message.assistant").nth(1).locator(".sources").count() == 0
