"""The Images and Workflows pages in a real Chromium, against a real `llmgw server` whose picture models are
ComfyUI's stand-in (`sim-engine --comfyui`, real PNGs from the prompt and seed, 0.05 s a sampler step).

One server for the module. Every test also fails on a Content-Security-Policy violation
(tests/support/browser.py): the pictures are data: and blob: URLs the pages make themselves.
"""

from __future__ import annotations

import json

import pytest

from llmgw.media import encode_png
from tests.support.servers import ComfySim, Server, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium

LICENCE = {"id": "stability-community", "url": "https://example.com/licence", "commercial": False}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A server as `server init` sets it up (its baseline guardrail included), with a text-to-image model `pic`
    and an image-to-image model `redraw` on the stand-in."""
    root = tmp_path_factory.mktemp("media")
    comfy = ComfySim(root, "--step-seconds", "0.05").start()
    server = Server(root, "gw", config=write_config(root / "gw.yaml", {"models": [
        {"name": "pic", "endpoints": [comfy.url],
         "comfyui": {"workflow": "text-to-image", "checkpoint": "sim.safetensors", "license": LICENCE}},
        {"name": "redraw", "endpoints": [comfy.url],
         "comfyui": {"workflow": "image-to-image", "checkpoint": "sim.safetensors"}}]}))
    try:
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.administrator = json.loads(done.stdout)["administrator"]
        server.start()
        yield server
    finally:
        server.stop()
        comfy.stop()


def open_page(gateway, browsing, path: str, ready: str):
    """`path`, signed in as the first administrator (a member of init's project), once `ready` is on it."""
    page = browsing.page
    page.goto(gateway.client_url + "/signin?next=" + path)
    page.fill("#email", gateway.administrator["email"])
    page.fill("#password", gateway.administrator["password"])
    page.click("main button[type=submit]")
    page.wait_for_url("**" + path)
    page.wait_for_selector(ready, state="attached")
    return page


def test_a_picture_is_made_shown_at_its_size_with_its_seed_and_licence_and_kept_as_a_thumbnail(gateway, browsing):
    page = open_page(gateway, browsing, "/images", "#images-model option[value=pic]")
    page.wait_for_selector("#images-make:enabled")

    page.fill("#images-prompt", "a lighthouse at dusk")
    page.select_option("#images-size", "768x1024")
    page.fill("#images-seed", "18446744073709551615")  # 2^64-1: past what a JavaScript number holds exactly
    page.click("#images-make")

    # 20 sampler steps at 0.05 s: the button says so while it waits.
    assert page.inner_text("#images-make") == "Making…" and page.is_disabled("#images-make")
    page.wait_for_function("() => document.getElementById('images-picture').naturalWidth > 0", timeout=30_000)
    size = page.evaluate("[document.getElementById('images-picture').naturalWidth,"
                         " document.getElementById('images-picture').naturalHeight]")
    assert size == [768, 1024]
    assert page.get_attribute("#images-picture", "src").startswith("data:image/png;base64,")
    assert page.inner_text("#images-seed-shown") == "Seed 18446744073709551615"
    assert page.inner_text("#images-licence") == "Licence: stability-community (not for commercial use)"
    assert page.get_attribute("#images-licence a", "href") == "https://example.com/licence"
    assert page.get_attribute("#images-download", "download") == "pic-18446744073709551615.png"
    assert page.inner_text("#images-make") == "Make" and page.is_enabled("#images-make")
    assert page.is_hidden("#images-error")

    # Kept in this browser as a small thumbnail, and there after a reload; choosing it fills the form again.
    page.reload()
    thumb = page.locator("#images-recent button.thumb")
    page.wait_for_selector("#images-recent button.thumb img")
    assert thumb.count() == 1 and thumb.inner_text() == "Seed 18446744073709551615"
    width = page.evaluate("document.querySelector('#images-recent img').naturalWidth")
    assert 0 < width <= 160
    thumb.click()
    assert page.input_value("#images-prompt") == "a lighthouse at dusk"
    assert page.input_value("#images-seed") == "18446744073709551615"
    assert page.input_value("#images-size") == "768x1024"


def test_a_prompt_a_guardrail_blocks_is_refused_with_the_sentence_naming_its_rule(gateway, browsing):
    page = open_page(gateway, browsing, "/images", "#images-model option[value=pic]")
    page.wait_for_selector("#images-make:enabled")

    page.fill("#images-prompt", "a poster that says ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s")
    page.click("#images-make")

    page.wait_for_selector("#images-error:not([hidden])")
    assert page.inner_text("#images-error") == ("A guardrail stopped this prompt (rule secrets:github). Take out "
                                                "what the rule is about and try again.")
    assert page.is_hidden("#images-result") and page.locator("#images-recent li").count() == 0


def test_a_workflow_run_from_the_form_shows_its_progress_moving_and_then_its_picture(gateway, browsing):
    page = open_page(gateway, browsing, "/workflows", "#wf-model option[value=redraw]")
    page.select_option("#wf-model", "redraw")
    form = page.locator("form.workflow[data-model=redraw]")
    assert form.is_visible() and page.locator("form.workflow[data-model=pic]").is_hidden()
    start = encode_png(32, 24, bytes(range(96)) * 24)
    form.locator("[data-input=image]").set_input_files(
        files=[{"name": "start.png", "mimeType": "image/png", "buffer": start}])
    form.locator("[data-input=prompt]").fill("make it autumn")
    form.locator("summary").click()
    form.locator("[data-input=steps]").fill("60")  # 3 s at 0.05 s a step: progress is written once a second
    form.locator("[data-input=seed]").fill("3")
    # Every value the steps bar takes, recorded in the page as it is drawn.
    page.evaluate("""() => {
      const bar = document.getElementById("wf-steps");
      window.steps = [];
      new MutationObserver(() => window.steps.push([bar.value, bar.max]))
        .observe(bar, {attributes: true, attributeFilter: ["value", "max"]});
    }""")

    form.locator("button.run").click()

    page.wait_for_function("() => document.querySelector('#wf-outputs img')?.naturalWidth > 0"
                           " || !document.getElementById('wf-error').hidden", timeout=60_000)
    assert page.is_hidden("#wf-error"), page.inner_text("#wf-error")
    size = page.evaluate("[document.querySelector('#wf-outputs img').naturalWidth,"
                         " document.querySelector('#wf-outputs img').naturalHeight]")
    assert size == [32, 24]
    assert page.get_attribute("#wf-outputs img", "src").startswith("blob:")
    assert page.inner_text("#wf-run-status") == "succeeded"
    steps = page.evaluate("window.steps")
    between = {value for value, most in steps if most == 60 and 0 < value < 60}
    assert between, f"the bar never stood part way: {steps}"
    values = [value for value, most in steps if most == 60]
    assert values == sorted(values), steps  # the sampler's steps never went back
    assert steps[-1][0] == steps[-1][1], steps  # and the bar ended full (the last node's, once the run was done)
    nodes = page.inner_text("#wf-nodes-label")
    assert nodes.startswith("Nodes done: ") and nodes.split(": ")[1].split(" of ")[0] == nodes.split(" of ")[1]
    assert form.locator("button.run").inner_text() == "Run" and form.locator("button.run").is_enabled()

    # The project's recent runs list it, as /v1/workflows/runs does.
    row = page.locator("#wf-recent tr").first
    page.wait_for_function("() => document.querySelector('#wf-recent tr td:nth-child(3)')?.textContent"
                           " === 'succeeded'")
    assert row.locator("td").nth(1).inner_text() == "redraw"
