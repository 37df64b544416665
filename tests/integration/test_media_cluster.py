"""A ComfyUI model placed on a node as a node runs it: `llmgw agent` starts the ComfyUI named in its agent.yaml
(here a main.py that is ComfyUI's stand-in), with the model's weights, and the picture is asked of the gateway."""

from __future__ import annotations

import base64
import json
import sys
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from llmgw.media import read_text, size
from tests.support.agents import AgentProcess
from tests.support.waiting import wait_for, wait_until

ROOT = Path(__file__).resolve().parents[2]

# ComfyUI's main.py, as the agent finds it in engines.comfyui.dir: here it becomes the stand-in, with the flags
# the agent gave ComfyUI (--listen, --port, --cpu).
# The engine runs in a directory of its own with the environment the agent gives it, so the checkout under test
# is named: the llmgw installed in the interpreter's environment may be an older one.
MAIN_PY = f"""import os, sys
os.environ["PYTHONPATH"] = {str(ROOT)!r}
os.execv({sys.executable!r}, [{sys.executable!r}, "-m", "llmgw", "sim-engine", "--comfyui", *sys.argv[1:]])
"""


@pytest.fixture
def cluster(servers, tmp_path):
    cp = servers("cp-a")
    assert cp.init().returncode == 0
    cp.start()
    wait_for(cp.leads, timeout=15)
    made = cp.ctl_json("keys", "create", "app", "--project", "Demo/dev/app", "--create")
    cp.key = made["key"]
    cp.openai = openai.OpenAI(api_key=made["key"], base_url=cp.client_url + "/v1", max_retries=0)
    comfy = tmp_path / "ComfyUI"
    comfy.mkdir()
    (comfy / "main.py").write_text(MAIN_PY)
    (comfy / "comfyui_version.py").write_text('__version__ = "0.3.62"\n')
    agent = AgentProcess(tmp_path, "node-a").join(cp, engines={"user": "", "comfyui": {"dir": str(comfy)}})
    agent.start()
    cp.agent_process = agent
    yield cp
    agent.stop(stop_engines=True)


def test_a_comfyui_model_is_placed_on_a_node_and_makes_pictures_and_runs(cluster, tmp_path):
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    node = cluster.ctl_json("ctl", "nodes")[0]
    assert "comfyui" in json.dumps(node), node  # the node offers the ComfyUI its agent.yaml names
    weights = tmp_path / "weights" / "dreamy-v1.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"\0" * 4096)
    spec = {"name": "dreamy", "source": str(weights),
            "profiles": [{"engine": "comfyui", "cpu_cores": 1, "memory": "256MB"}],
            "comfyui": {"workflow": "text-to-image", "license": {"id": "openrail-m", "commercial": True}}}
    path = tmp_path / "dreamy.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = cluster.ctl("ctl", "model", "add", "-f", str(path))
    assert done.returncode == 0, done.stdout + done.stderr

    def ready():
        replicas = cluster.ctl_json("ctl", "replicas", "--model", "dreamy")
        return any(r["state"] == "ready" for r in replicas)
    try:
        wait_until(ready, 60, "dreamy's ComfyUI replica answered /system_stats", interval=0.5)
    except AssertionError as e:
        replicas = cluster.ctl_json("ctl", "replicas", "--model", "dreamy", "--all")
        raise AssertionError(f"{e}\nreplicas: {replicas}\nagent said:\n{cluster.agent_process.output()[-4000:]}") \
            from None

    listed = {m["name"]: m for m in cluster.ctl_json("ctl", "models")}
    assert listed["dreamy"]["capabilities"] == ["images", "workflows"]

    # The checkpoint ComfyUI is asked for is the weights the agent fetched: the stand-in lists only those.
    made = wait_until(lambda: _picture(cluster), 30, "a picture from dreamy", interval=0.5)
    png = base64.b64decode(made.data[0].b64_json)
    assert size(png) == (128, 96) and json.loads(read_text(png)["license"]) == {"id": "openrail-m",
                                                                                 "commercial": True}

    request = urllib.request.Request(cluster.client_url + "/v1/workflows/runs", data=json.dumps(
        {"model": "dreamy", "inputs": {"prompt": "a harbour", "steps": 3, "width": 64, "height": 64}}).encode(),
        headers={"Authorization": f"Bearer {cluster.key}", "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as r:
        run = json.loads(r.read())

    def ended():
        asked = urllib.request.Request(cluster.client_url + f"/v1/workflows/runs/{run['id']}",
                                       headers={"Authorization": f"Bearer {cluster.key}"})
        with urllib.request.urlopen(asked, timeout=30) as r:
            doc = json.loads(r.read())
        return doc if doc["status"] not in ("queued", "running") else None
    doc = wait_until(ended, 60, "the run on the node ended", interval=0.5)
    assert doc["status"] == "succeeded", doc
    assert doc["outputs"][0]["content_type"] == "image/png"


def _picture(cp):
    try:
        return cp.openai.images.generate(model="dreamy", prompt="a quiet harbour", size="128x96",
                                         extra_body={"steps": 2})
    except openai.APIStatusError as e:
        if e.status_code in (503, 404):  # the router has not been handed the ready replica yet
            return None
        raise
