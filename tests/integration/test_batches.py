"""Files and batches through OpenAI's own SDK, against a real `llmgw server` and a real sim-engine.

One server for the module: the thousand-line batch, the refusals, and the
batch whose server is killed (SIGKILL) in the middle and started again on
the same store and data directory. The tests run in any order, so each has
a project and key of its own (`own`): files, the quota and the usage sums
are a project's.
"""

from __future__ import annotations

import hashlib
import io
import json
import signal
import time
import urllib.error
import urllib.request

import openai
import pytest

from tests.support.servers import Server, SimEngine, serving_with_first_key, write_config
from tests.support.waiting import wait_until

LINES = 1000
PROMPT_PER_1K = 1000  # micro-units: 0.001 a thousand prompt tokens
COMPLETION_PER_1K = 2000
DISCOUNT = 50
MAX_FILE = 256 * 1024
QUOTA = 1024 * 1024
SECRET = "sk-proj-" + "a1B2c3D4" * 6  # what the module's guardrail policy refuses to send on


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    engine = SimEngine(root, "qwen", "--max-tokens-default", "4").start()
    config = write_config(root / "gw.yaml", {
        "router": {"batch": {"max_file_bytes": MAX_FILE, "project_quota": QUOTA, "store_below": 4096,
                             "concurrency": 32}},
        "models": [{"name": "qwen", "endpoints": [engine.url],
                    "price": {"prompt_per_1k": PROMPT_PER_1K, "completion_per_1k": COMPLETION_PER_1K,
                              "batch_discount": DISCOUNT}}],
        "guard": {"default": ["secrets"], "policies": {"secrets": {"mode": "enforce", "input": {"secrets": "block"}}}}})
    server = serving_with_first_key(Server(root, "gw", config=config))
    server.engine = engine
    yield server
    server.stop()
    engine.stop()


class Own:
    """A test's own project on the module's server, with a key and an SDK client for it."""

    def __init__(self, gw, project: str):
        made = gw.ctl_json("keys", "create", "--project", project, "--create", project.rsplit("/", 1)[1])
        self.gw, self.project, self.key, self.client_url = gw, project, made["key"], gw.client_url
        self.openai = openai.OpenAI(api_key=self.key, base_url=gw.client_url + "/v1", max_retries=0)


@pytest.fixture
def own(gw, request):
    return Own(gw, "Default/default/t" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10])


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def chat_lines(prefix: str, count: int = LINES) -> bytes:
    return jsonl([{"custom_id": f"{prefix}-{n}", "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "qwen", "max_tokens": 4,
                            "messages": [{"role": "user", "content": f"Question {n}?"}]}}
                  for n in range(count)])


def upload(gw, content: bytes, name: str = "lines.jsonl"):
    return gw.openai.files.create(file=(name, io.BytesIO(content)), purpose="batch")


def finished(gw, batch_id: str, timeout: float = 120):
    def ended():
        batch = gw.openai.batches.retrieve(batch_id)
        return batch if batch.status in ("completed", "failed", "expired", "cancelled") else None
    return wait_until(ended, timeout, f"batch {batch_id} ended", interval=0.2)


def batch_usage(own: Own) -> dict:
    """The batch lines' sums of the test's own project (none yet: nothing)."""
    rows = own.gw.ctl_json("ctl", "usage", "--batch", "--by", "project", "--since", "1h")["rows"]
    return next((row for row in rows if row["name"] == own.project), {"requests": 0, "cost_micros": 0})


def outputs(gw, batch) -> list[dict]:
    text = gw.openai.files.content(batch.output_file_id).text
    return [json.loads(line) for line in text.splitlines()]


def expected_cost(rows: list[dict]) -> int:
    total = 0
    for row in rows:
        usage = row["response"]["body"]["usage"]
        # cost() rounds each part up to a micro-unit, then the discount rounds up again.
        full = (-(-usage["prompt_tokens"] * PROMPT_PER_1K // 1000)
                + -(-usage["completion_tokens"] * COMPLETION_PER_1K // 1000))
        total += -(-full * (100 - DISCOUNT) // 100)
    return total


def test_a_thousand_line_batch_is_answered_line_by_line_and_billed_at_the_batch_price(gw, own):
    started = time.monotonic()
    file = upload(own, chat_lines("q"))
    assert file.purpose == "batch" and file.bytes > 0 and file.id.startswith("file-")
    batch = own.openai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                     completion_window="24h", metadata={"job": "nightly"})
    assert batch.status == "in_progress" and batch.request_counts.total == LINES

    done = finished(own, batch.id)
    took = time.monotonic() - started

    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0)
    assert done.error_file_id is None and done.metadata == {"job": "nightly"}
    rows = outputs(own, done)
    assert sorted(row["custom_id"] for row in rows) == sorted(f"q-{n}" for n in range(LINES))
    assert all(row["response"]["status_code"] == 200 and row["error"] is None for row in rows)
    assert all(row["response"]["body"]["choices"][0]["message"]["content"] for row in rows)
    usage = batch_usage(own)
    assert usage["requests"] == LINES
    assert usage["cost_micros"] == expected_cost(rows) > 0
    print(f"\n{LINES} lines uploaded, run and read back in {took:.1f} s")


def test_a_file_that_breaks_a_rule_is_refused_naming_its_line(gw, own):
    good = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}}
    cases = {
        b'{"custom_id": "a"\n': "line 1 is not JSON",
        jsonl([good, {**good, "url": "/v1/images"}]): 'line 2: "url" must be one of',
        jsonl([good, good]): "line 2: custom_id 'a' is also on line 1",
        jsonl([good, {**good, "custom_id": "b", "method": "GET"}]): 'line 2: "method" must be "POST"',
        jsonl([{**good, "body": {"messages": []}}]): 'line 1: the body needs "model"',
        jsonl([{**good, "body": {**good["body"], "stream": True}}]): '"stream" must be false',
        jsonl([good]) + b"\n" + jsonl([{**good, "custom_id": "b"}]): "line 2 is empty",
        b"": "the file has no requests",
    }
    for content, sentence in cases.items():
        with pytest.raises(openai.BadRequestError) as refused:
            upload(own, content)
        assert sentence in refused.value.body["message"], (content, refused.value.body)
        assert refused.value.body["code"] == "invalid_file"

    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.files.create(file=("a.jsonl", io.BytesIO(jsonl([good]))), purpose="fine-tune")
    assert refused.value.body["param"] == "purpose"


def send(gw, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
         key: bool = True) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {gw.key}"} if key else {}
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(gw.client_url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def form(**fields: bytes) -> bytes:
    parts = [b'--xx\r\nContent-Disposition: form-data; name="%s"%s\r\n\r\n%s\r\n'
             % (name.encode(), b'; filename="a.jsonl"' if name == "file" else b"", value)
             for name, value in fields.items()]
    return b"".join(parts) + b"--xx--\r\n"


def test_an_upload_that_is_not_a_readable_form_is_refused_with_400_never_500(gw, own):
    multipart = "multipart/form-data; boundary=xx"
    sent = {
        "a JSON body": (b'{"purpose": "batch"}', "application/json"),
        "no boundary": (b"junk", "multipart/form-data"),
        "a broken form": (b"junk", multipart),
        "no purpose": (form(file=chat_lines("p", 1)), multipart),
        "no file": (form(purpose=b"batch"), multipart),
    }
    for what, (body, content_type) in sent.items():
        status, answer = send(own, "POST", "/v1/files", body, content_type)
        assert status == 400 and answer["error"]["message"], (what, answer)
    assert send(own, "POST", "/v1/files", form(purpose=b"batch", file=chat_lines("p", 1)), multipart)[0] == 200
    status, answer = send(own, "GET", "/v1/files?limit=0")
    assert status == 400 and answer["error"]["param"] == "limit"
    status, answer = send(own, "POST", "/v1/batches", json.dumps({
        "input_file_id": "file-000000000000000000000000", "endpoint": "/v1/chat/completions",
        "completion_window": "24h", "metadata": {"k": "v" * 600}}).encode(), "application/json")
    assert status == 400 and answer["error"]["param"] == "metadata"
    assert send(own, "GET", "/v1/files", key=False)[0] == 401  # no key, no files


def test_a_batch_that_asks_for_what_is_not_here_is_refused_with_a_sentence(gw, own):
    chat = upload(own, chat_lines("r", 2))
    bad = {
        (chat.id, "/v1/completions", "24h"): ("endpoint must be one of", 400),
        (chat.id, "/v1/chat/completions", "1h"): ('completion_window must be "24h"', 400),
        (chat.id, "/v1/embeddings", "24h"): ("line 1 is for /v1/chat/completions", 400),
        ("file-000000000000000000000000", "/v1/chat/completions", "24h"): ("there is no file", 404),
        ("../../etc/passwd", "/v1/chat/completions", "24h"): ("there is no file", 404),
    }
    for (file_id, endpoint, window), (sentence, status) in bad.items():
        with pytest.raises(openai.APIStatusError) as refused:
            own.openai.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window=window)
        assert refused.value.status_code == status and sentence in refused.value.body["message"], refused.value.body
    with pytest.raises(openai.NotFoundError):
        own.openai.batches.retrieve("batch_nothere")
    with pytest.raises(openai.NotFoundError):
        own.openai.files.content("file-000000000000000000000000")


def test_a_key_of_another_project_sees_none_of_the_files_or_batches(gw):
    mine = upload(gw, chat_lines("s", 1))
    made = gw.ctl_json("keys", "create", "--project", "Default/default/other", "--create", "other")
    other = openai.OpenAI(api_key=made["key"], base_url=gw.client_url + "/v1", max_retries=0)

    assert mine.id not in [f.id for f in other.files.list()]
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.files.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.create(input_file_id=mine.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert gw.openai.files.retrieve(mine.id).id == mine.id
    assert gw.openai.files.delete(mine.id).deleted is True


def test_a_file_past_the_upload_bound_or_the_projects_quota_is_refused_with_413(gw, own):
    line = chat_lines("big", 1)
    with pytest.raises(openai.APIStatusError) as refused:
        upload(own, line * (MAX_FILE // len(line) + 1))
    assert refused.value.status_code == 413 and "router.batch.max_file_bytes" in refused.value.body["message"]

    held = sum(f.bytes for f in own.openai.files.list())
    filler = chat_lines("fill", MAX_FILE // (2 * len(line)))
    assert len(filler) < MAX_FILE
    kept = []
    with pytest.raises(openai.APIStatusError) as refused:
        for _ in range((QUOTA - held) // len(filler) + 2):
            kept.append(upload(own, filler))
    assert refused.value.status_code == 413 and "router.batch.project_quota" in refused.value.body["message"]
    assert kept, "the quota refused the first file, with room for it"
    for file in kept:
        own.openai.files.delete(file.id)
    upload(own, filler)  # room again once files are deleted


def test_a_cancelled_batch_ends_cancelled_and_an_ended_one_cannot_be_cancelled(gw, own):
    file = upload(own, chat_lines("c", 300))
    batch = own.openai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert own.openai.batches.cancel(batch.id).status == "cancelling"

    done = finished(own, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert done.request_counts.completed + done.request_counts.failed < 300
    assert own.openai.batches.cancel(batch.id).status == "cancelled"  # asked again: as it is

    one = own.openai.batches.create(input_file_id=upload(own, chat_lines("d", 1)).id,
                                   endpoint="/v1/chat/completions", completion_window="24h")
    assert finished(own, one.id).status == "completed"
    with pytest.raises(openai.ConflictError) as refused:
        own.openai.batches.cancel(one.id)
    assert "can no longer be cancelled" in refused.value.body["message"]


def test_a_line_the_gateway_or_a_guardrail_refuses_is_in_the_error_file_with_one_usage_row(gw, own):
    before = batch_usage(own)["requests"]
    rows = [{"custom_id": "good", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "qwen", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}},
            {"custom_id": "nowhere", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}},
            {"custom_id": "shapeless", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "qwen", "messages": "not a list"}},
            {"custom_id": "leaky", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "qwen", "messages": [{"role": "user", "content": f"use {SECRET}"}]}}]
    batch = own.openai.batches.create(input_file_id=upload(own, jsonl(rows)).id, endpoint="/v1/chat/completions",
                                     completion_window="24h")

    done = finished(own, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 3)
    assert [row["custom_id"] for row in outputs(own, done)] == ["good"]
    text = own.openai.files.content(done.error_file_id).text
    errors = [json.loads(line) for line in text.splitlines()]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [
        ("nowhere", 404), ("shapeless", 400), ("leaky", 400)]
    assert "there is no model no-such-model" in errors[0]["response"]["body"]["error"]["message"]
    assert errors[2]["response"]["body"]["error"]["code"] == "guardrail_blocked" and SECRET not in text
    assert batch_usage(own)["requests"] - before == 4


def test_a_server_killed_mid_batch_neither_loses_nor_repeats_a_line(gw, own):
    before = batch_usage(own)["requests"]
    file = upload(own, chat_lines("k"))
    batch = own.openai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")

    def partway():
        counts = own.openai.batches.retrieve(batch.id).request_counts
        return 0 < counts.completed < LINES and counts.completed
    done_before = wait_until(partway, 60, "some lines of the batch were recorded, not all", interval=0.02)
    gw.signal(signal.SIGKILL)
    gw.proc.wait(timeout=10)
    gw.log.close()
    gw.start()

    done = finished(own, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0)
    rows = outputs(own, done)
    assert len(rows) == LINES
    assert sorted(row["custom_id"] for row in rows) == sorted(f"k-{n}" for n in range(LINES))
    assert batch_usage(own)["requests"] - before == LINES
    print(f"\nkilled with {done_before} of {LINES} lines recorded")


def test_with_worker_processes_the_first_worker_runs_the_batch(tmp_path):
    engine = SimEngine(tmp_path, "qwen", "--max-tokens-default", "2").start()
    config = write_config(tmp_path / "gw.yaml", {"workers": 2, "models": [{"name": "qwen", "endpoints": [engine.url]}]})
    server = Server(tmp_path, "workers", config=config)
    try:
        serving_with_first_key(server)
        batch = server.openai.batches.create(input_file_id=upload(server, chat_lines("w", 20)).id,
                                             endpoint="/v1/chat/completions", completion_window="24h")
        done = finished(server, batch.id)
        assert (done.status, done.request_counts.completed) == ("completed", 20)
        assert sorted(row["custom_id"] for row in outputs(server, done)) == sorted(f"w-{n}" for n in range(20))
    finally:
        server.stop()
        engine.stop()
