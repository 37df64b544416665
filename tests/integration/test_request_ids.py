"""A request is found by the id its client was given, and `ctl requests` lists and tails them.

SDK users hold the answer's id (chatcmpl-…, msg_…, resp_…), rarely the
x-request-id header (issue 11, item 4). Real SDKs, a real llmgw server and
a real sim-engine on loopback.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import openai
import pytest

from tests.support.servers import serving_with_first_key, write_config
from tests.support.waiting import wait_for

CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def gw(servers, engines, tmp_path):
    engine = engines("qwen")
    config = write_config(tmp_path / "gw.yaml", {"models": [{"name": "qwen", "endpoints": [engine.url]}]})
    server = servers("gw", config=config)
    return serving_with_first_key(server)


def found(server, given_id: str) -> dict | None:
    """`llmgw ctl request ID --json` once the row is written; None if it never is."""
    def look():
        done = server.ctl("ctl", "request", given_id, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None
    row, _ = wait_for(look, timeout=10, interval=0.3)
    return row


def test_every_id_an_sdk_returns_finds_its_request_with_ctl_request(gw):
    chat = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=3)
    streamed = list(gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=3, stream=True))
    message = gw.anthropic.messages.create(model="qwen", max_tokens=16, messages=CHAT)
    with gw.anthropic.messages.stream(model="qwen", max_tokens=16, messages=CHAT) as stream:
        streamed_message = stream.get_final_message()
    response = gw.openai.responses.create(model="qwen", input="Hello")
    with gw.openai.responses.stream(model="qwen", input="Hello") as stream:
        streamed_response = stream.get_final_response()

    given = {chat.id: "chat", streamed[0].id: "chat", message.id: "messages", streamed_message.id: "messages",
             response.id: "responses", streamed_response.id: "responses"}
    assert chat.id.startswith("chatcmpl-") and message.id.startswith("msg_") and response.id.startswith("resp_")
    assert len(given) == 6  # six answers, six ids
    requests = set()
    for answer_id, api in given.items():
        row = found(gw, answer_id)
        assert row is not None, f"ctl request {answer_id} found nothing"
        assert row["answer_id"] == answer_id and row["detail"]["api"] == api and row["model"] == "qwen"
        assert row["id"].startswith("req_")
        requests.add(row["id"])
    assert len(requests) == 6
    # The Responses answer's message item carries an id of its own: it finds the same request.
    item = next(o for o in response.output if o.type == "message")
    assert found(gw, item.id)["answer_id"] == response.id


def test_an_answer_replayed_from_the_cache_is_found_by_its_id_as_the_request_that_replayed_it(gw):
    assert gw.ctl("keys", "cache", "--project", "Default/default/default", "--ttl", "1h").returncode == 0

    def hit():
        raw = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, temperature=0)
        return raw if raw.headers.get("x-llmgw-cache") == "hit" else None

    # The setting reaches the router within its next read; misses until then.
    again, _ = wait_for(hit, timeout=15, interval=0.5)
    assert again is not None, "the answer cache never answered"
    request_id, given = again.headers["x-request-id"], again.parse().id

    def the_hit():
        row = found(gw, given)
        return row if row and row["id"] == request_id else None
    row, _ = wait_for(the_hit, timeout=10, interval=0.3)
    assert row is not None and row["cache"] == "hit" and row["answer_id"] == given


def test_an_id_that_is_no_requests_is_a_sentence_naming_the_ids_that_work(gw):
    done = gw.ctl("ctl", "request", "chatcmpl-nothing")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "there is no request chatcmpl-nothing" in done.stderr and "x-request-id" in done.stderr


def test_ctl_requests_lists_the_latest_requests_filtered_by_model_and_status(gw):
    answer = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        gw.openai.chat.completions.create(model="nosuch", messages=CHAT, max_tokens=2)

    def listed(*flags):
        return gw.ctl_json("ctl", "requests", *flags)["rows"]

    both, _ = wait_for(lambda: len(listed()) == 2 and listed(), timeout=10, interval=0.3)
    assert [r["status"] for r in both] == [200, 404]  # newest last, as a log reads
    assert [r["answer_id"] for r in listed("--model", "qwen")] == [answer.id]
    assert [r["status"] for r in listed("--status", "error")] == [404]
    assert [r["status"] for r in listed("--status", "200")] == [200]
    # By the key's name, as people know it; the unknown model's 404 was asked with a valid key, so it is the key's too.
    assert [r["status"] for r in listed("--key", "first key")] == [200, 404]
    unknown = gw.ctl("ctl", "requests", "--key", "nosuch")
    assert unknown.returncode == 1 and "there is no key with the id or name nosuch" in unknown.stderr
    table = gw.ctl("ctl", "requests", "--model", "qwen")
    assert table.returncode == 0 and answer.id in table.stdout and "404" not in table.stdout
    refused = gw.ctl("ctl", "requests", "--status", "lots")
    assert refused.returncode == 1 and 'not "lots"' in refused.stderr and "Traceback" not in refused.stderr


def test_ctl_requests_follow_shows_a_new_request_and_ends_quietly_on_ctrl_c(gw):
    # Ctrl-C at a terminal: SIGINT as the tail's own default. A suite started in the background by a shell
    # without job control (`build.py test &` in a script) has SIGINT ignored, which a child inherits across exec
    # and Python then leaves ignored: the tail would never see the signal (two runs of 2026-12-07 waited 10 s).
    tail = subprocess.Popen([sys.executable, "-m", "llmgw", "ctl", "requests", "--follow", "--admin", gw.admin,
                             "--token-file", gw.token_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in tail.stdout], daemon=True).start()
    try:
        assert lines.get(timeout=30).startswith("WHEN")  # the header: the tail is running
        answer = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=2)
        seen = []
        while not any(answer.id in line for line in seen):
            seen.append(lines.get(timeout=15))
        assert "qwen" in seen[-1] and " 200 " in seen[-1]
    finally:
        os.kill(tail.pid, signal.SIGINT)
        code = tail.wait(timeout=10)
    assert code == 0
    assert "Traceback" not in tail.stderr.read()
