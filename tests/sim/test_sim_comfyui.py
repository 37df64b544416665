"""`llmgw sim-engine --comfyui` as the gateway sees it: a real process, driven with llmgw's ComfyUI client.

The stand-in is started as the agent starts ComfyUI (`--listen HOST --port
PORT --cpu`). Each test draws with a seed of its own: the stand-in caches
node outputs across prompts as ComfyUI does, so a graph run twice with the
same seed is not sampled again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import subprocess
import sys
import zlib

import aiohttp
import pytest

from llmgw.engines.comfyclient import ComfyClient, ComfyError, Progress
from llmgw.media import encode_png, read_text, size
from tests.support.simengines import Sim

AS_THE_AGENT_STARTS_IT = ("--comfyui", "--listen", "127.0.0.1", "--cpu")


@pytest.fixture(scope="module")
def comfy():
    s = Sim(*AS_THE_AGENT_STARTS_IT, "--step-seconds", "0.01").start()
    yield s
    s.stop()


@pytest.fixture
def comfys():
    """Start stand-ins with their own flags; every one is stopped after the test."""
    started: list[Sim] = []

    def start(*args: str) -> Sim:
        s = Sim(*AS_THE_AGENT_STARTS_IT, *args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def text_to_image(text: str, seed: int, *, width: int = 64, height: int = 48, batch: int = 1, steps: int = 4,
                  prefix: str = "llmgw", ckpt: str = "sim.safetensors") -> dict:
    """ComfyUI's default workflow in its API format, as the examples and the frontend's "Save (API)" write it."""
    return {
        "3": {"class_type": "KSampler", "inputs": {
            "seed": seed, "steps": steps, "cfg": 7.5, "sampler_name": "euler", "scheduler": "normal", "denoise": 1,
            "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": width, "height": height, "batch_size": batch}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": prefix, "images": ["8", 0]}},
    }


def pixels(png: bytes) -> bytes:
    """The inflated IDAT of a PNG, read with zlib alone."""
    at, idat = 8, b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        if png[at + 4:at + 8] == b"IDAT":
            idat += png[at + 8:at + 8 + length]
        at += 12 + length
    return zlib.decompress(idat)


async def run(s: Sim, graph: dict, **kw) -> list:
    async with aiohttp.ClientSession() as http:
        return await ComfyClient(http, s.url).run(graph, **kw)


async def refusal(s: Sim, graph: dict, **kw) -> ComfyError:
    with pytest.raises(ComfyError) as caught:
        await run(s, graph, **kw)
    return caught.value


def test_it_says_where_it_listens_in_one_line(comfy):
    assert comfy.line.startswith("sim-engine comfyui listening on http://127.0.0.1:")


async def test_a_text_to_image_run_returns_pngs_of_the_asked_size_with_the_prompt_inside(comfy):
    graph = text_to_image("a lighthouse at dusk", 101, width=64, height=48, batch=2, prefix="t2i/lighthouse")
    outputs = await run(comfy, graph)
    assert [(o.node, o.kind, o.subfolder) for o in outputs] == [("9", "images", "t2i")] * 2
    assert [o.filename for o in outputs] == ["lighthouse_00001_.png", "lighthouse_00002_.png"]
    for o in outputs:
        assert size(o.data) == (64, 48)
        assert len(pixels(o.data)) == 48 * (1 + 64 * 3)
        # SaveImage writes the prompt it ran into the file, as ComfyUI does (a tEXt "prompt").
        assert json.loads(read_text(o.data)["prompt"])["6"]["inputs"]["text"] == "a lighthouse at dusk"
    assert pixels(outputs[0].data) != pixels(outputs[1].data), "each picture of a batch is its own"


async def test_a_size_that_is_not_a_multiple_of_8_comes_out_cut_to_one_as_comfyui_latents_do(comfy):
    outputs = await run(comfy, text_to_image("an odd size", 102, width=100, height=36))
    assert size(outputs[0].data) == (96, 32)


async def test_the_same_prompt_and_seed_draw_the_same_pixels_and_another_seed_others(comfy):
    first = await run(comfy, text_to_image("a red fox", 103, prefix="a"))
    again = await run(comfy, text_to_image("a red fox", 103, prefix="b"))
    other = await run(comfy, text_to_image("a red fox", 104, prefix="c"))
    words = await run(comfy, text_to_image("a blue fox", 103, prefix="d"))
    assert pixels(first[0].data) == pixels(again[0].data)
    assert pixels(first[0].data) != pixels(other[0].data)
    assert pixels(first[0].data) != pixels(words[0].data)


async def test_the_same_graph_again_is_cached_whole_as_comfyui_caches_it_and_gives_the_first_files(comfy):
    graph = text_to_image("a cached cat", 105)
    seen: list[Progress] = []
    first = await run(comfy, graph)
    again = await run(comfy, graph, on_progress=seen.append)
    assert [o.filename for o in again] == [o.filename for o in first]
    assert not [p for p in seen if p.max], "nothing was sampled the second time"
    assert seen[0].done_nodes == 7, "every node, SaveImage too, came from execution_cached"


async def test_progress_arrives_step_by_step_in_order(comfy):
    seen: list[Progress] = []
    await run(comfy, text_to_image("a slow painting", 106, steps=6), on_progress=seen.append)
    steps = [(p.value, p.max, p.node) for p in seen if p.max]
    assert steps == [(n, 6, "3") for n in range(1, 7)]
    done = [p.done_nodes for p in seen]
    assert done == sorted(done), "nodes done never go back"
    assert (seen[-1].done_nodes, seen[-1].total_nodes) == (7, 7)
    assert {p.node for p in seen} >= set("3689"), "each node that ran was reported (4, 5 and 7 may be cached)"


async def test_an_async_progress_callback_is_awaited(comfy):
    seen: list[int] = []

    async def show(p: Progress) -> None:
        await asyncio.sleep(0)
        seen.append(p.value)

    await run(comfy, text_to_image("awaited", 107, steps=3), on_progress=show)
    assert [v for v in seen if v] == [1, 2, 3]


async def test_a_bad_graph_is_a_400_naming_the_node_its_class_and_the_input(comfy):
    graph = text_to_image("no seed", 108)
    del graph["3"]["inputs"]["seed"]
    graph["5"]["inputs"]["width"] = 8
    e = await refusal(comfy, graph)
    assert e.status == 400
    assert "node 3 (KSampler): Required input is missing: seed" in e.message
    assert "node 5 (EmptyLatentImage): Value 8 smaller than min of 16: width" in e.message
    assert e.node_errors["3"]["class_type"] == "KSampler"
    assert e.node_errors["3"]["errors"][0]["type"] == "required_input_missing"
    assert e.node_errors["3"]["dependent_outputs"] == ["9"]


async def test_a_prompt_with_no_output_node_is_refused_as_comfyui_refuses_it(comfy):
    graph = text_to_image("nowhere to go", 109)
    del graph["9"]
    async with aiohttp.ClientSession() as http:
        async with http.post(comfy.url + "/prompt", json={"prompt": graph}) as r:
            assert r.status == 400
            body = await r.json()
    assert body == {"error": {"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "",
                              "extra_info": {}}, "node_errors": {}}
    e = await refusal(comfy, graph)
    assert e.status == 400 and "Prompt has no outputs" in e.message and "SaveImage" in e.message


async def test_a_class_comfyui_does_not_have_is_refused_naming_the_node(comfy):
    graph = text_to_image("custom", 110)
    graph["10"] = {"class_type": "UpscaleWithMagic", "inputs": {"image": ["8", 0]}}
    e = await refusal(comfy, graph)
    assert e.status == 400
    assert e.message == ("ComfyUI refused the workflow: node 10 (UpscaleWithMagic): Node 'UpscaleWithMagic' not "
                         "found. The custom node may not be installed.")


async def test_a_link_to_a_node_the_graph_lacks_is_refused_naming_the_node_that_holds_it(comfy):
    graph = text_to_image("dangling", 111)
    graph["3"]["inputs"]["positive"] = ["66", 0]
    e = await refusal(comfy, graph)
    assert e.status == 400
    assert "node 3 (KSampler): an input links to node '66', which the workflow does not have" in e.message


async def test_a_value_off_its_list_is_refused_with_the_list(comfy):
    graph = text_to_image("odd sampler", 112)
    graph["3"]["inputs"]["scheduler"] = "wobbly"
    e = await refusal(comfy, graph)
    assert "node 3 (KSampler): Value not in list: scheduler: 'wobbly' not in ['simple'" in e.message


async def test_an_explode_prompt_fails_in_execution_after_some_progress_naming_the_node(comfy):
    seen: list[Progress] = []
    e = await refusal(comfy, text_to_image("please explode now", 113, steps=6), on_progress=seen.append)
    assert e.status == 502
    assert e.message.startswith("ComfyUI failed at node 3 (KSampler): RuntimeError: ")
    assert "please" not in e.message, "the sentence does not quote the person's prompt"
    assert [p.value for p in seen if p.max] == [1, 2, 3]


async def test_an_uploaded_picture_feeds_load_image_for_an_image_to_image_run(comfy):
    source = encode_png(40, 24, bytes(range(256)) * 11 + bytes(64))
    async with aiohttp.ClientSession() as http:
        client = ComfyClient(http, comfy.url + "/v1")  # the address a replica has, /v1 and all
        name = await client.upload_image(source, "holiday.png")
        assert name == "holiday.png"
        assert await client.upload_image(source, "holiday.png") == "holiday.png", "the same bytes, the same file"
        assert await client.upload_image(encode_png(8, 8, bytes(192)), "holiday.png") == "holiday (1).png"
        async with http.get(comfy.url + "/object_info/LoadImage") as r:
            choices = (await r.json())["LoadImage"]["input"]["required"]["image"][0]
        assert "holiday.png" in choices
        graph = text_to_image("the same beach, in winter", 114)
        graph["10"] = {"class_type": "LoadImage", "inputs": {"image": name}}
        graph["11"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["10", 0], "vae": ["4", 2]}}
        graph["3"]["inputs"]["latent_image"] = ["11", 0]
        graph["3"]["inputs"]["denoise"] = 0.6
        del graph["5"]
        outputs = await client.run(graph)
    assert size(outputs[0].data) == (40, 24)


async def test_a_load_image_of_a_file_never_uploaded_is_refused(comfy):
    graph = {"10": {"class_type": "LoadImage", "inputs": {"image": "../secrets.png"}},
             "11": {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}}}
    e = await refusal(comfy, graph)
    assert "node 10 (LoadImage): Custom validation failed for node: image - Invalid image file: ../secrets.png" \
        in e.message


async def test_view_and_upload_refuse_names_that_climb_out_of_their_folders(comfy):
    async with aiohttp.ClientSession() as http:
        for query, status in [("filename=../output/x.png", 400), ("filename=/etc/passwd", 400),
                              ("filename=passwd&subfolder=../../../etc", 403), ("filename=x.png&type=models", 400),
                              ("filename=never_made.png", 404)]:
            async with http.get(f"{comfy.url}/view?{query}") as r:
                assert r.status == status, query
        # Written by hand: aiohttp's own form would percent-encode the slashes, which ComfyUI keeps as a name.
        for disposition in ['name="image"; filename="../../escape.png"', 'name="image"; filename="/tmp/escape.png"']:
            body = (f'--b\r\nContent-Disposition: form-data; {disposition}\r\nContent-Type: image/png\r\n\r\n'
                    '\x89PNG\r\n--b--\r\n').encode()
            async with http.post(comfy.url + "/upload/image", data=body,
                                 headers={"Content-Type": "multipart/form-data; boundary=b"}) as r:
                assert r.status == 400, disposition
        form = aiohttp.FormData()
        form.add_field("image", b"\x89PNG", filename="fine.png", content_type="image/png")
        form.add_field("subfolder", "../..")
        async with http.post(comfy.url + "/upload/image", data=form) as r:
            assert r.status == 400


async def test_the_websocket_sends_comfyuis_messages_in_comfyuis_order(comfys):
    comfy = comfys()  # its own, so that no node of the graph is cached from another test
    graph = text_to_image("watched closely", 116, steps=3)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(comfy.url + "/ws?clientId=watcher") as ws:
            hello = await ws.receive_json()
            assert hello == {"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}},
                                                        "sid": "watcher"}}
            async with http.post(comfy.url + "/prompt", json={"prompt": graph, "client_id": "watcher"}) as r:
                queued = await r.json()
            assert set(queued) == {"prompt_id", "number", "node_errors"} and queued["node_errors"] == {}
            pid = queued["prompt_id"]
            said = []
            while not said or said[-1] != ("executing", None):
                m = await asyncio.wait_for(ws.receive_json(), 10)
                if m["type"] in ("status", "progress_state"):
                    continue
                assert m["data"]["prompt_id"] == pid
                said.append((m["type"], m["data"].get("node", m["data"].get("value"))))
            async with http.get(f"{comfy.url}/history/{pid}") as r:
                history = (await r.json())[pid]
    assert said == [("execution_start", None), ("execution_cached", None),
                    ("executing", "4"), ("executing", "6"), ("executing", "7"), ("executing", "5"),
                    ("executing", "3"), ("progress", "3"), ("progress", "3"), ("progress", "3"),
                    ("executing", "8"), ("executing", "9"), ("executed", "9"),
                    ("execution_success", None), ("executing", None)]
    assert history["status"]["status_str"] == "success" and history["status"]["completed"] is True
    assert [m[0] for m in history["status"]["messages"]] == ["execution_start", "execution_cached",
                                                             "execution_success"]
    assert history["outputs"]["9"]["images"][0]["type"] == "output"
    assert history["prompt"][1] == pid and history["prompt"][4] == ["9"]


async def test_preview_frames_on_the_websocket_are_ignored(comfys):
    s = comfys("--preview-method", "auto")
    seen: list[Progress] = []
    outputs = await run(s, text_to_image("with previews", 117, steps=3), on_progress=seen.append)
    assert len(outputs) == 1 and [p.value for p in seen if p.max] == [1, 2, 3]


async def test_without_a_websocket_the_client_polls_the_history(comfy):
    class NoUpgrade:
        """A session whose websockets a proxy refuses, as some refuse the upgrade."""

        def __init__(self, http: aiohttp.ClientSession):
            self.get, self.post = http.get, http.post

        async def ws_connect(self, *args, **kw):
            raise aiohttp.ClientConnectionError("the proxy refused the upgrade")

    async with aiohttp.ClientSession() as http:
        outputs = await ComfyClient(NoUpgrade(http), comfy.url).run(text_to_image("polled", 118))
    assert size(outputs[0].data) == (64, 48)


async def test_a_run_past_its_time_is_a_504_and_is_interrupted_on_comfyui(comfy):
    e = await refusal(comfy, text_to_image("far too long", 119, steps=500), timeout=0.5)
    assert e.status == 504 and "0.5 s" in e.message
    async with aiohttp.ClientSession() as http:
        for _ in range(50):
            async with http.get(comfy.url + "/queue") as r:
                queue = await r.json()
            if not queue["queue_running"]:
                break
            await asyncio.sleep(0.1)
        assert queue == {"queue_running": [], "queue_pending": []}
        async with http.get(comfy.url + "/history?max_items=1") as r:
            (entry,) = (await r.json()).values()
    assert entry["status"]["status_str"] == "error"
    assert entry["status"]["messages"][-1][0] == "execution_interrupted"


async def test_a_comfyui_that_dies_mid_run_is_a_502(comfys):
    s = comfys("--step-seconds", "0.2")

    def kill(p: Progress) -> None:
        if p.value == 1:
            os.kill(s.proc.pid, signal.SIGKILL)

    e = await refusal(s, text_to_image("doomed", 120, steps=50), on_progress=kill, timeout=30)
    assert e.status == 502 and s.url in e.message


async def test_the_model_the_agent_names_is_the_checkpoint_offered(comfys, monkeypatch, tmp_path):
    weights = tmp_path / "sdxl-turbo.safetensors"
    weights.write_bytes(b"\x00")
    monkeypatch.setenv("LLMGW_COMFYUI_MODEL", str(weights))
    s = comfys()
    async with aiohttp.ClientSession() as http:
        async with http.get(s.url + "/object_info") as r:
            info = await r.json()
        async with http.get(s.url + "/system_stats") as r:
            stats = await r.json()
    assert info["CheckpointLoaderSimple"]["input"]["required"]["ckpt_name"][0] == ["sdxl-turbo.safetensors"]
    assert stats["devices"][0]["type"] == "cpu" and "--cpu" in stats["system"]["argv"]
    assert (await run(s, text_to_image("turbo", 121, ckpt="sdxl-turbo.safetensors")))[0].kind == "images"
    e = await refusal(s, text_to_image("turbo", 122))
    assert "ckpt_name: 'sim.safetensors' not in ['sdxl-turbo.safetensors']" in e.message


def test_an_openai_flag_beside_comfyui_is_a_usage_error_naming_it():
    r = subprocess.run([sys.executable, "-m", "llmgw", "sim-engine", "--comfyui", "--tokens-per-second", "5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--tokens-per-second" in r.stderr and "--comfyui" in r.stderr
