"""The chat page in a real Chromium, against a real `llmgw server` and a streaming, echoing sim-engine.

The engine answers with the words of the last message it was sent (`--echo`), 20 a second, so a
test chooses the answer: a long one to watch grow or to stop, a hostile one to render. Every test
also fails on a Content-Security-Policy violation (tests/support/browser.py).
"""

from __future__ import annotations

import json

import pytest

from tests.support.servers import Server, SimEngine, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium

LAST_ANSWER = ".message.assistant:last-of-type .body"


def serving(root, **cluster):
    """A server as `server init` sets it up, in front of an echoing sim model `qwen`; stopped at the end."""
    # Past 200 tokens an answer stalls until the page hangs up: Stop is then pressed mid-way however slowly
    # this machine runs. A timed answer (100 sentences, 20 s at 20 tokens a second) once ran to its end first
    # on a machine with two suites at once.
    engine = SimEngine(root, "qwen", "--echo", "--tokens-per-second", "20", "--stall-after", "200").start()
    server = Server(root, "gw", config=write_config(root / "gw.yaml", {
        "models": [{"name": "qwen", "endpoints": [engine.url]}], **cluster}))
    try:
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.administrator = json.loads(done.stdout)["administrator"]
        server.start()
        yield server
    finally:
        server.stop()
        engine.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """One server for the module, with `server init`'s baseline guardrail."""
    yield from serving(tmp_path_factory.mktemp("chat"))


@pytest.fixture(scope="module")
def answers_guarded(tmp_path_factory):
    """A server whose only guardrail reads answers: a secret in an answer stops it mid-way."""
    yield from serving(tmp_path_factory.mktemp("guarded"), guard={"default": ["answers"], "policies": {
        "answers": {"mode": "enforce", "output": {"secrets": "block"}}}})


def open_chat(gateway, browsing):
    page = browsing.page
    page.goto(gateway.client_url + "/signin?next=/chat")
    page.fill("#email", gateway.administrator["email"])
    page.fill("#password", gateway.administrator["password"])
    page.click("main button[type=submit]")
    page.wait_for_url("**/chat")
    page.wait_for_selector("#chat-model option[value=qwen]", state="attached")
    return page


@pytest.fixture
def chat(gateway, browsing):
    """The chat page, signed in as the first administrator (a member of init's project)."""
    return open_chat(gateway, browsing)


def send(page, text: str) -> None:
    page.fill("#chat-input", text)
    page.click("#chat-send")


def wait_answered(page) -> None:
    """Until the answer has ended (streamed to its end, stopped, or refused): Send is back."""
    page.wait_for_selector("#chat-send", state="visible", timeout=30_000)


def words(n: int) -> str:
    """An answer of n sentences (the sim echoes it), read by the baseline guardrail as it streams."""
    return " ".join(f"Sentence {i} is here." for i in range(n))


def test_an_answer_grows_on_the_page_as_it_streams(chat):
    # Every length the answer had, as the page drew it, recorded in the page: no polling from here.
    chat.evaluate("""() => {
      window.lengths = new Set();
      new MutationObserver(() => {
        const body = document.querySelector(".message.assistant:last-of-type .body");
        if (body) window.lengths.add(body.textContent.length);
      }).observe(document.getElementById("chat-messages"), {childList: true, subtree: true, characterData: true});
    }""")

    send(chat, words(12))
    wait_answered(chat)

    lengths = chat.evaluate("[...window.lengths]")
    assert len(set(lengths)) >= 5, lengths
    assert chat.inner_text(LAST_ANSWER).strip() == words(12)
    assert chat.is_hidden("#chat-error")


def test_stop_ends_an_answer_mid_way_and_the_conversation_is_kept_in_the_browser(chat):
    send(chat, words(100))  # stalls half way (--stall-after), until Stop
    chat.wait_for_function("() => document.querySelector('.message.assistant:last-of-type .body')"
                           "?.textContent.length > 30")

    chat.click("#chat-stop")
    wait_answered(chat)

    stopped = chat.inner_text(LAST_ANSWER)
    assert "Stopped before the answer was finished." in stopped
    assert 30 < len(stopped) < len(words(100))
    send(chat, "short")  # the next answer comes and goes; the stopped one did not grow meanwhile
    wait_answered(chat)
    answers = chat.locator(".message.assistant .body")
    assert answers.nth(0).inner_text() == stopped and answers.nth(1).inner_text().strip() == "short"

    chat.reload()
    chat.wait_for_selector(".message.assistant")
    assert chat.locator(".message.assistant .body").nth(0).inner_text() == stopped
    assert chat.locator("#conversation-list button").first.inner_text() == words(100)[:60].strip()


def test_a_markdown_answer_with_raw_html_and_script_links_injects_nothing_and_shows_the_text(chat):
    hostile = ('<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> '
               '<iframe src="javascript:window.pwned=3"></iframe>\n\n'
               '**Bold** and [click](javascript:window.pwned=4) and [docs](https://example.com/docs)\n\n'
               '```\n<b>not bold</b>\n```')

    send(chat, hostile)
    wait_answered(chat)

    answer = chat.locator(LAST_ANSWER)
    assert answer.locator("img, script, iframe, b").count() == 0
    assert answer.locator("strong").inner_text() == "Bold"
    links = answer.locator("a")
    assert links.count() == 1 and links.get_attribute("href") == "https://example.com/docs"
    assert links.get_attribute("rel") == "noopener noreferrer nofollow"
    text = answer.inner_text()
    assert '<img src=x onerror="window.pwned=1">' in text and "[click](javascript:window.pwned=4)" in text
    assert answer.locator("pre code").inner_text() == "<b>not bold</b>"
    assert answer.locator("button.copy-code").inner_text() == "Copy"
    assert chat.evaluate("window.pwned") is None
    # What was typed is shown as typed, never formatted.
    assert chat.locator(".message.user .typed").last.inner_text() == hostile


def test_a_guardrails_refusal_is_shown_as_a_sentence_naming_the_rule(chat):
    send(chat, "my token is ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s")
    wait_answered(chat)

    assert chat.inner_text("#chat-error") == ("A guardrail stopped this message (rule secrets:github). Take out "
                                              "what the rule is about and send it again.")


def test_an_answer_a_guardrail_stops_mid_way_keeps_what_came_and_says_why(answers_guarded, browsing):
    chat = open_chat(answers_guarded, browsing)

    send(chat, "This part is fine. The token is ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s today.")
    wait_answered(chat)

    answer = chat.inner_text(LAST_ANSWER)
    assert "This part is fine." in answer and "ghp_" not in answer
    assert "A guardrail stopped this answer part way; what came before is shown." in answer


def test_a_new_conversation_starts_empty_and_a_deleted_one_is_gone(chat):
    send(chat, "first")
    wait_answered(chat)
    chat.click("#new-conversation")
    assert chat.locator(".message").count() == 0
    send(chat, "second")
    wait_answered(chat)
    titles = chat.locator("#conversation-list button")
    assert [titles.nth(i).inner_text() for i in range(titles.count())] == ["second", "first"]

    chat.once("dialog", lambda dialog: dialog.accept())
    chat.click("#delete-conversation")

    assert [titles.nth(i).inner_text() for i in range(titles.count())] == ["first"]
    assert chat.locator(".message.assistant .body").inner_text().strip() == "first"
