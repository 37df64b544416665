"""The /images and /workflows pages as the server writes them (in process, real store, both dialects): which
projects and models they offer, and each workflow's form as its declared inputs make it. What the browser does
with them is test_media_browser.py's."""

from __future__ import annotations

import html
import json
import re
from types import SimpleNamespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor, ChatTokens
from llmgw.config import ClusterSettings, ComfyUIModel, License, ServerConfig, WorkflowInput
from llmgw.events import Events
from llmgw.portal import mount
from llmgw.store import Limits

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
LICENCE = License(id="stability-community", url="https://example.com/licence", commercial=False)
# A workflow of its own, with the inputs the built-in ones lack: a boolean, a choice, a mask and a file.
MESH_FLOW = {
    "1": {"class_type": "LoadImage", "inputs": {"image": "{{mask}}"}},
    "2": {"class_type": "MakeMesh", "inputs": {"points": "{{source}}", "mask": ["1", 0], "flip": "{{flip}}",
                                               "style": "{{style}}", "notes": "{{notes}}"}},
    "3": {"class_type": "SaveGLB", "inputs": {"mesh": ["2", 0]}},
}


class Entry:
    """A model of the registry as the media pages read it."""

    def __init__(self, name: str, *can: str, comfyui: ComfyUIModel | None = None, ready: bool = True):
        self.name = name
        self.settings = SimpleNamespace(can=can, comfyui=comfyui)
        self.on_demand = False
        self._ready = ready

    def usable(self) -> list[str]:
        return ["endpoint"] if self._ready else []


class Plane:
    """What the media pages read of the process serving them: the store, settings, chat credentials, models."""

    def __init__(self, store, flow_path: str):
        self.store = store
        self.settings = SimpleNamespace(current=ClusterSettings())
        self.cfg = ServerConfig()
        self.chat = ChatTokens(store, lambda: 5.0)
        mesh = ComfyUIModel(workflow=flow_path, output="meshes", inputs={
            "source": WorkflowInput(type="file", required=True, description="The points to mesh."),
            "mask": WorkflowInput(type="mask"),
            "flip": WorkflowInput(type="boolean", default=True),
            "style": WorkflowInput(type="choice", choices=["smooth", "sharp"], default="sharp"),
            "notes": WorkflowInput(type="text", max=200)})
        self.router = SimpleNamespace(registry=SimpleNamespace(models={
            "pic": Entry("pic", "images", "workflows", comfyui=ComfyUIModel(license=LICENCE)),
            "redraw": Entry("redraw", "images", "workflows", comfyui=ComfyUIModel(workflow="image-to-image"),
                            ready=False),
            "mesh": Entry("mesh", "workflows", comfyui=mesh),
            "qwen": Entry("qwen", "chat", "completions")}), events=Events())


@pytest.fixture
async def client(store, tmp_path):
    flow = tmp_path / "mesh.json"
    flow.write_text(json.dumps(MESH_FLOW))
    accounts = Accounts(store)
    for project in ("art", "narrow"):
        await store.ensure_project("Acme", "ml", project)
    narrow = await store.project_by_path("Acme", "ml", "narrow")
    await store.put_limits(Limits("project", narrow.project.id, models=["pic", "qwen"]))
    await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password=PASSWORD,
                              member_of=["team:Acme/ml"])
    await accounts.people.add(ROOT, email="bo@example.com", name="Bo", password=PASSWORD)
    app = web.Application()
    mount(app, Plane(store, str(flow)))
    async with TestClient(TestServer(app)) as c:
        yield c


async def _sign_in(client, email: str) -> None:
    page = await (await client.get("/signin")).text()
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    signed = await client.post("/signin", data={"_csrf": csrf, "email": email, "password": PASSWORD},
                               allow_redirects=False)
    assert signed.status == 303


def _options(page: str, select: str) -> list[str]:
    block = re.search(rf'<select id="{select}"[^>]*>(.*?)</select>', page, re.S).group(1)
    return [html.unescape(o) for o in re.findall(r"<option[^>]*>([^<]*)</option>", block)]


def _form(page: str, model: str) -> str:
    return re.search(rf'<form class="workflow" data-model="{model}"[^>]*>.*?</form>', page, re.S).group(0)


def _control(form: str, name: str) -> str:
    """The opening tag of the control for input `name`."""
    return re.search(rf'<(?:input|textarea|select)[^>]*data-input="{name}"[^>]*>', form, re.S).group(0)


async def test_the_images_page_offers_the_picture_models_the_project_allows_and_no_other(client):
    await _sign_in(client, "ada@example.com")

    answer = await client.get("/images")
    page = await answer.text()

    assert answer.status == 200 and answer.headers["Cache-Control"] == "no-store"
    assert _options(page, "images-project") == ["Acme/ml/art", "Acme/ml/narrow"]
    assert _options(page, "images-model") == ["pic", "redraw"]  # not the mesh maker, not the chat model
    assert _options(page, "images-size") == ["512 × 512", "768 × 768", "1024 × 1024", "1024 × 768", "768 × 1024"]
    assert re.search(r'<option value="1024x1024" selected>', page)
    narrow = await (await client.get("/images?project=Acme/ml/narrow")).text()
    assert _options(narrow, "images-model") == ["pic"]


async def test_the_images_page_says_the_pictures_stay_in_the_browser_and_carries_the_credential_once(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/images")).text()

    token = re.search(r'data-token="([^"]+)"', page).group(1)
    assert token.startswith("llmgw-chat-") and page.count(token) == 1
    assert 'data-keep="12"' in page
    assert "The last 12 pictures you made are kept here as small thumbnails, in this browser only" in page
    assert "media.js" in page and "images.js" in page
    assert 'data-error-guardrail-blocked="A guardrail stopped this prompt (rule {rule}).' in page
    assert 'data-error-budget-exceeded="This project&#39;s budget is spent for now.' in page  # the chat's sentence


async def test_the_workflows_page_lists_the_models_with_a_workflow_the_project_allows(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/workflows")).text()

    assert _options(page, "wf-model") == ["mesh", "pic", "redraw"]
    assert re.findall(r'<form class="workflow" data-model="(\w+)"( hidden)?>', page) == [
        ("mesh", ""), ("pic", " hidden"), ("redraw", " hidden")]  # the first is shown until another is chosen
    narrow = await (await client.get("/workflows?project=Acme/ml/narrow")).text()
    assert _options(narrow, "wf-model") == ["pic"]


async def test_each_declared_input_gets_the_control_its_type_calls_for(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/workflows?model=redraw")).text()

    assert re.search(r'<form class="workflow" data-model="redraw">', page)  # the one asked for is shown
    redraw = _form(page, "redraw")
    image = _control(redraw, "image")
    assert 'type="file"' in image and 'accept="image/*"' in image and "required" in image
    prompt = _control(redraw, "prompt")
    assert prompt.startswith("<textarea") and 'maxlength="4000"' in prompt and "required" in prompt
    steps = _control(redraw, "steps")
    assert all(a in steps for a in ('type="number"', 'step="1"', 'value="20"', 'min="1"', 'max="150"'))
    assert 'step="any"' in _control(redraw, "strength") and 'value="0.6"' in _control(redraw, "strength")
    seed = _control(redraw, "seed")
    assert 'type="number"' in seed and 'value=""' in seed and 'placeholder="random"' in seed
    assert _control(redraw, "sampler").startswith("<select") and '<option value="euler" selected>' in redraw
    # What must be given comes first; the rest waits under "Other inputs".
    assert redraw.index('data-input="image"') < redraw.index("<summary>Other inputs</summary>") < redraw.index(
        'data-input="steps"')
    assert "No replica of it is ready: a run waits until one is." in redraw

    mesh = _form(page, "mesh")
    assert 'type="checkbox"' in _control(mesh, "flip") and "checked" in _control(mesh, "flip")
    assert '<option value="sharp" selected>' in mesh
    source = _control(mesh, "source")
    assert 'type="file"' in source and "accept=" not in source
    assert 'accept="image/*"' in _control(mesh, "mask")
    assert "It makes 3D meshes." in mesh and "mesh.json" not in mesh  # a workflow file's path is not shown


async def test_a_models_licence_is_shown_beside_its_form(client):
    await _sign_in(client, "ada@example.com")

    pic = _form(await (await client.get("/workflows")).text(), "pic")

    assert ('<a href="https://example.com/licence" rel="noopener noreferrer nofollow">stability-community</a>'
            in pic)
    assert "(not for commercial use)" in pic and "Built-in workflow: text-to-image." in pic


@pytest.mark.parametrize("path", ["/images", "/workflows"])
async def test_a_person_in_no_project_is_told_to_ask_for_one_and_gets_no_form(client, path):
    await _sign_in(client, "bo@example.com")

    page = await (await client.get(path)).text()

    assert "You are not a member of any project, so there is nowhere to" in page
    assert "<form class=\"workflow\"" not in page and 'id="images-form"' not in page and "media.js" not in page


async def test_the_pages_are_in_the_nav_after_chat_and_need_javascript_only_for_making(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/workflows")).text()

    nav = re.search(r'<nav class="main".*?</nav>', page, re.S).group(0)
    assert re.findall(r'href="(/[^"]*)"', nav)[:3] == ["/chat", "/images", "/workflows"]
    assert "Running a workflow needs JavaScript" in page
    assert re.search(r'<button type="submit" class="primary run" disabled>Run</button>', page)


async def test_a_signed_out_browser_is_sent_to_sign_in_first(client):
    answer = await client.get("/workflows", allow_redirects=False)

    assert answer.status == 303 and answer.headers["Location"] == "/signin?next=/workflows"


async def test_a_turkish_reader_gets_the_pages_in_turkish(client):
    await _sign_in(client, "ada@example.com")

    images = await (await client.get("/images", headers={"Accept-Language": "tr"})).text()
    workflows = await (await client.get("/workflows", headers={"Accept-Language": "tr"})).text()

    assert "<h1>Görseller</h1>" in images and "<h1>İş akışları</h1>" in workflows
    assert 'data-label-making="Yapılıyor…"' in images
