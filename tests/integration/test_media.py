"""Pictures and workflow runs through a real `llmgw server`, with ComfyUI's stand-in (`sim-engine --comfyui`) as
the models' replicas, the openai SDK as the client and the mcp SDK as the agent.

One server for the module; each test has a project and key of its own (`own`), so its usage sums, files and
runs are its own whatever order the tests run in.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import urllib.error
import urllib.request

import httpx2
import openai
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from llmgw.media import encode_png, read_text, size
from tests.support.servers import ComfySim, Server, SimEngine, serving_with_first_key, write_config
from tests.support.waiting import wait_until

PER_IMAGE = 2500  # micro-units a picture
SECRET = "sk-proj-" + "a1B2c3D4" * 6  # what the module's guardrail policy refuses to send on
LICENSE = {"id": "stability-community", "url": "https://example.com/licence", "commercial": False,
           "excluded_regions": ["EU"]}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    comfy = ComfySim(root, "--step-seconds", "0.05").start()
    chat = SimEngine(root, "qwen").start()
    config = write_config(root / "gw.yaml", {
        "models": [
            {"name": "pic", "endpoints": [comfy.url], "price": {"per_image": PER_IMAGE},
             "comfyui": {"workflow": "text-to-image", "checkpoint": "sim.safetensors", "license": LICENSE}},
            {"name": "redraw", "endpoints": [comfy.url],
             "comfyui": {"workflow": "image-to-image", "checkpoint": "sim.safetensors"}},
            {"name": "qwen", "endpoints": [chat.url], "capabilities": ["chat", "completions"]},
            # An OpenAI-compatible images endpoint of its own (the sim speaks OpenAI's): passed the request as it came.
            {"name": "painter", "endpoints": [chat.url], "capabilities": ["images"],
             "price": {"per_image": PER_IMAGE}}],
        "guard": {"default": ["secrets"],
                  "policies": {"secrets": {"mode": "enforce", "input": {"secrets": "block"}}}}})
    server = serving_with_first_key(Server(root, "gw", config=config))
    server.comfy = comfy
    yield server
    server.stop()
    comfy.stop()
    chat.stop()


class Own:
    """A test's own project on the module's server, with a key and an SDK client for it."""

    def __init__(self, gw, project: str, tools: str | None = None):
        made = gw.ctl_json("keys", "create", "--project", project, "--create", project.rsplit("/", 1)[1])
        self.gw, self.project, self.key, self.key_id = gw, project, made["key"], made["id"]
        if tools:
            done = gw.ctl("keys", "limits", "--scope", "key", "--id", self.key_id, "--tools", tools)
            assert done.returncode == 0, done.stderr
        self.openai = openai.OpenAI(api_key=self.key, base_url=gw.client_url + "/v1", max_retries=0)

    def get(self, path: str, accept: str = "application/json") -> tuple[int, str, bytes]:
        request = urllib.request.Request(self.gw.client_url + path, headers={
            "Authorization": f"Bearer {self.key}", "Accept": accept})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(self.gw.client_url + path, data=json.dumps(body).encode(), headers={
            "Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


def _own(gw, name: str, tools: str | None = None) -> Own:
    return Own(gw, "Default/default/m" + hashlib.sha256(name.encode()).hexdigest()[:10], tools)


@pytest.fixture
def own(gw, request):
    return _own(gw, request.node.name)


def project_usage(own: Own, requests: int) -> dict:
    def summed():
        rows = own.gw.ctl_json("ctl", "usage", "--by", "project", "--since", "1h")["rows"]
        row = next((r for r in rows if r["name"] == own.project), None)
        return row if row is not None and row["requests"] >= requests else None
    return wait_until(summed, 20, f"{requests} usage rows of {own.project}", interval=0.3)


def test_the_openai_sdk_makes_a_picture_carrying_the_models_licence(own):
    made = own.openai.images.generate(model="pic", prompt="a lighthouse at dusk", size="256x192",
                                      extra_body={"seed": 11, "steps": 3})
    png = base64.b64decode(made.data[0].b64_json)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and size(png) == (256, 192)
    text = read_text(png)
    assert json.loads(text["license"]) == LICENSE
    assert text["Source"] == "llmgw model pic"
    extra = made.model_extra or {}
    assert extra["seed"] == 11 and extra["license"] == LICENSE and made.size == "256x192"
    # The same seed and prompt make the same picture again.
    again = own.openai.images.generate(model="pic", prompt="a lighthouse at dusk", size="256x192",
                                       extra_body={"seed": 11, "steps": 3})
    assert base64.b64decode(again.data[0].b64_json) == png


def test_each_picture_is_charged_at_the_models_price_and_counted_in_usage(own):
    made = own.openai.images.generate(model="pic", prompt="two red apples", n=2, size="128x128",
                                      extra_body={"steps": 2})
    assert len(made.data) == 2 and made.data[0].b64_json != made.data[1].b64_json
    row = project_usage(own, 1)
    assert row["requests"] == 1 and row["cost_micros"] == 2 * PER_IMAGE


def test_a_prompt_the_guardrails_block_is_refused_and_never_reaches_comfyui(gw, own):
    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.images.generate(model="pic", prompt=f"a poster that says {SECRET}", size="64x64")
    assert refused.value.code == "guardrail_blocked"
    request_id = refused.value.response.headers["x-request-id"]

    def recorded():
        done = gw.ctl("ctl", "request", request_id, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None
    asked = wait_until(recorded, 15, "the refused request's usage row", interval=0.3)
    assert asked["status"] == 400 and not asked.get("endpoint")
    assert SECRET not in gw.comfy.output()


def test_comfyui_is_left_no_history_of_a_persons_prompt(gw, own):
    own.openai.images.generate(model="pic", prompt="a private sketch", size="64x64", extra_body={"steps": 1})
    assert "a private sketch" not in json.dumps(gw.comfy.history())


def test_a_value_the_workflow_cannot_take_is_refused_naming_it(own):
    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.images.generate(model="pic", prompt="a cat", extra_body={"steps": 500})
    assert "steps: 500 is more than the most, 150" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.images.generate(model="pic", prompt="a cat", extra_body={"colour": "red"})
    assert '"colour" is neither OpenAI\'s nor one of this model\'s inputs' in refused.value.message


def test_a_chat_request_to_a_picture_model_and_a_picture_asked_of_a_chat_model_are_refused(own):
    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.chat.completions.create(model="pic", messages=[{"role": "user", "content": "hi"}])
    assert "pic does images and workflows, not chat" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        own.openai.images.generate(model="qwen", prompt="a cat")
    assert refused.value.code == "unsupported_capability"


def test_a_picture_as_a_url_is_a_file_of_the_callers_project_alone(gw, own, request):
    made = own.openai.images.generate(model="pic", prompt="a blue door", size="64x64", response_format="url",
                                      extra_body={"steps": 1})
    url = made.data[0].url
    assert url.startswith(gw.client_url + "/v1/files/file-") and url.endswith("/content")
    status, kind, body = own.get(url.removeprefix(gw.client_url))
    assert status == 200 and kind == "image/png" and size(body) == (64, 64)
    stranger = _own(gw, request.node.name + "-other")  # another project's key: the file is not there for it
    assert stranger.get(url.removeprefix(gw.client_url))[0] == 404


def test_a_workflow_run_is_a_job_followed_step_by_step_to_its_picture(gw, own):
    start = encode_png(32, 32, bytes(range(96)) * 32)
    status, run = own.post("/v1/workflows/runs", {"model": "redraw", "inputs": {
        "image": "data:image/png;base64," + base64.b64encode(start).decode(), "prompt": "make it autumn",
        "steps": 60, "seed": 3}, "metadata": {"ticket": "T-9"}})
    assert status == 200, run
    assert run["status"] == "queued" and run["object"] == "workflow.run" and run["metadata"] == {"ticket": "T-9"}
    # The picture sent inline is kept as a file of the project: the run holds its id, not its bytes.
    assert run["inputs"]["image"].startswith("file-")

    status, kind, stream = own.get(f"/v1/workflows/runs/{run['id']}", accept="text/event-stream")
    assert status == 200 and kind.startswith("text/event-stream")
    events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\ndata: ", 1)[1]))
              for block in stream.decode().split("\n\n") if block.strip()]
    assert events[-1][0] == "done"
    steps = [e["progress"]["value"] for kind_, e in events if kind_ == "progress" and e["progress"]]
    assert steps == sorted(steps) and len(steps) >= 2  # it moved, and never back
    done = events[-1][1]
    assert done["status"] == "succeeded" and done["request_id"].startswith("req_")
    output = done["outputs"][0]
    assert output["content_type"] == "image/png" and output["kind"] == "images"
    status, kind, png = own.get(output["url"].removeprefix(gw.client_url))
    assert status == 200 and size(png) == (32, 32)
    listed = json.loads(own.get("/v1/workflows/runs")[2])
    assert [r["id"] for r in listed["data"]] == [run["id"]]


def test_a_run_that_fails_in_comfyui_says_why_and_its_error_is_the_runs(own):
    status, run = own.post("/v1/workflows/runs", {"model": "pic", "inputs": {"prompt": "explode", "steps": 4}})
    assert status == 200, run

    def ended():
        doc = json.loads(own.get(f"/v1/workflows/runs/{run['id']}")[2])
        return doc if doc["status"] not in ("queued", "running") else None
    doc = wait_until(ended, 60, "the run ended")
    assert doc["status"] == "failed" and doc["outputs"] == []
    assert doc["error"]["code"] == "workflow_failed" and "KSampler" in doc["error"]["message"]


def test_a_run_is_refused_before_it_is_queued_when_its_inputs_do_not_fit(own):
    status, answer = own.post("/v1/workflows/runs", {"model": "redraw", "inputs": {"prompt": "x"}})
    assert status == 400 and answer["error"]["message"].startswith("image is required")
    status, answer = own.post("/v1/workflows/runs", {"model": "qwen", "inputs": {}})
    assert status == 400 and answer["error"]["code"] == "unsupported_capability"
    status, answer = own.post("/v1/workflows/runs", {"model": "pic", "inputs": {"prompt": f"say {SECRET}"}})
    assert status == 400 and answer["error"]["code"] == "guardrail_blocked"
    assert json.loads(own.get("/v1/workflows/runs")[2])["data"] == []


def test_the_workflows_list_gives_each_models_inputs(own):
    models = {m["model"]: m for m in json.loads(own.get("/v1/workflows")[2])["data"]}
    assert set(models) == {"pic", "redraw"}
    assert models["redraw"]["inputs"]["image"] == {"type": "image", "required": True,
                                                   "description": "The picture to start from."}
    assert models["pic"]["license"] == LICENSE and models["pic"]["images"] is True


async def _session(gw, key: str, work):
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with client, streamable_http_client(gw.client_url + "/mcp", http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def test_the_media_tools_make_a_picture_and_run_a_workflow_as_the_caller(gw, request):
    added = gw.ctl("ctl", "mcp", "add", "media", "--url", "llmgw:media")
    assert added.returncode == 0 or "already" in added.stderr, added.stderr
    own = _own(gw, request.node.name, tools="media.*")

    async def work(session):
        deadline = time.monotonic() + 30
        while True:
            names = [t.name for t in (await session.list_tools()).tools]
            if "media.generate_image" in names or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        picture = await session.call_tool("media.generate_image", {"prompt": "a green kite", "size": "80x64"})
        seen: list[float] = []

        async def progress(value, total, message):
            seen.append(value)
        ran = await session.call_tool("media.run_workflow", {"model": "pic", "inputs": {
            "prompt": "a kite", "steps": 6, "width": 64, "height": 64}}, progress_callback=progress)
        return names, picture, ran, seen

    names, picture, ran, seen = asyncio.run(_session(gw, own.key, work))
    assert {"media.generate_image", "media.run_workflow", "media.job_status", "media.list_workflows"} <= set(names)
    assert not picture.is_error
    image = next(c for c in picture.content if c.type == "image")
    assert size(base64.b64decode(image.data)) == (80, 64)
    assert picture.structured_content["license"] == LICENSE
    assert not ran.is_error and ran.structured_content["status"] == "succeeded"
    assert ran.structured_content["outputs"][0]["content_type"] == "image/png"
    # Both were the caller's requests: two pictures charged to its project.
    assert project_usage(own, 2)["cost_micros"] == 2 * PER_IMAGE


def test_a_key_at_its_request_limit_gets_no_picture_and_no_run(gw, request):
    own = _own(gw, request.node.name)
    done = gw.ctl("keys", "limits", "--scope", "key", "--id", own.key_id, "--rpm", "1")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: _limited(own), 15, "the key's limit of one request a minute in force", interval=0.5)
    status, answer = own.post("/v1/workflows/runs", {"model": "pic", "inputs": {"prompt": "a bird"}})
    assert status == 429 and answer["error"]["code"] == "rate_limited"


def _limited(own: Own) -> bool:
    try:
        own.openai.images.generate(model="pic", prompt="a small bird", size="64x64", extra_body={"steps": 1})
    except openai.RateLimitError:
        return True
    return False


def test_one_run_of_a_model_at_a_time_on_its_replica_the_next_waiting_for_it(own):
    runs = [own.post("/v1/workflows/runs", {"model": "pic", "inputs": {
        "prompt": f"a tree, take {n}", "steps": 30, "width": 64, "height": 64}})[1] for n in (1, 2)]

    def ended():
        docs = [json.loads(own.get(f"/v1/workflows/runs/{r['id']}")[2]) for r in runs]
        return docs if all(d["status"] == "succeeded" for d in docs) else None
    first, second = wait_until(ended, 60, "both runs ended")
    # router.jobs.per_model is 1: the second started once the first had ended, not beside it on ComfyUI's queue
    # (whole seconds, as the API gives them: a start after an end is never a smaller second).
    assert second["started_at"] >= first["ended_at"]


def test_a_workflow_failing_on_its_inputs_does_not_take_the_replica_out(own):
    # More failures than open a replica's breaker (router.breaker.failures, 5): they are the inputs' fault.
    for _ in range(6):
        with pytest.raises(openai.APIStatusError) as failed:
            own.openai.images.generate(model="pic", prompt="explode", size="64x64", extra_body={"steps": 2})
        assert failed.value.status_code == 502 and failed.value.code == "workflow_failed"
        assert "KSampler" in failed.value.message
    made = own.openai.images.generate(model="pic", prompt="a calm sea", size="64x64", extra_body={"steps": 1})
    assert size(base64.b64decode(made.data[0].b64_json)) == (64, 64)


def test_a_picture_asked_of_an_openai_compatible_endpoint_is_passed_on_and_charged_each(own):
    made = own.openai.images.generate(model="painter", prompt="a red kite", n=3, size="40x30")
    assert len(made.data) == 3
    assert {size(base64.b64decode(p.b64_json)) for p in made.data} == {(40, 30)}
    row = project_usage(own, 1)
    assert row["cost_micros"] == 3 * PER_IMAGE
