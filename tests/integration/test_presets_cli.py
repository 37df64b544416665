"""llmgw's presets through a real `llmgw server`: the leader adds one where a node fits it, and `llmgw ctl model
presets` lists, adds and turns them off.

The node is written to the store as the leader records an agent's Register (a card and ComfyUI are not on the
machines the tests run on; the agent's side of ComfyUI is tested in tests/agent); the hub is
tests/support/hfhub.py, in this process.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from llmgw.protocol import GPU, Heartbeat, Host, Register, to_dict
from llmgw.store import NodeRecord, open_store
from tests.support.hfhub import Hub, safetensors_bytes
from tests.support.pgcluster import free_port
from tests.support.waiting import wait_until


@pytest.fixture
def hub():
    with Hub().threaded() as hub:
        hub.flux = hub.repo("Comfy-Org/flux1-schnell", files={"flux1-schnell-fp8.safetensors": safetensors_bytes()})
        hub.repo("stabilityai/sdxl-turbo", files={"sd_xl_turbo_1.0_fp16.safetensors": safetensors_bytes()})
        yield hub


def put_gpu_node(server, name: str, card_gb: int) -> None:
    """A node with ComfyUI and one card, as the leader records it when its agent registers."""
    async def put():
        store = await open_store(server.store)
        now = time.time()
        register = Register(node_id=f"id-{name}", name=name, version="test", engines={"comfyui": "0.3.40"},
                            host=Host(hostname=name, cpu_cores=16, cpu_threads=16, memory_mb=64 * 1024),
                            gpus=[GPU(index=0, name="NVIDIA L4", memory_mb=card_gb * 1024,
                                      compute_capability="8.9")])
        await store.put_node(NodeRecord(f"id-{name}", name, to_dict(register), heartbeat=to_dict(Heartbeat(at=now)),
                                        heartbeat_at=now + 3600, state="connected", first_seen=now, updated_at=now))
        await store.close()

    asyncio.run(put())


def _states(server) -> dict[str, str]:
    return {p["name"]: p["state"] for p in server.ctl_json("ctl", "model", "presets")["presets"]}


def test_the_leader_adds_flux_schnell_where_a_node_has_comfyui_and_a_24_gb_card(server, hub):
    put_gpu_node(server, "gpu-a", 24)
    # A hub that does not answer: nothing is added unpinned, and the list says why.
    closed = f"http://127.0.0.1:{free_port()}"
    assert server.ctl("ctl", "config", "set", "hub.endpoint", closed).returncode == 0
    # The pass before the change (the node is there from the start) may have tried the default hub: the list
    # says the latest pass's failure, so it is waited for.
    failed = wait_until(lambda: [p for p in server.ctl_json("ctl", "model", "presets")["presets"]
                                 if closed in (p.get("error") or "")], 15, "the pass's failure at the closed hub")
    assert failed[0]["name"] == "flux-schnell" and f"could not reach Hugging Face at {closed}" in failed[0]["error"]
    assert server.ctl_json("ctl", "models") == []

    # Changing hub.endpoint wakes the pass: no 30 s wait.
    assert server.ctl("ctl", "config", "set", "hub.endpoint", hub.url).returncode == 0
    wait_until(lambda: "flux-schnell" in [m["name"] for m in server.ctl_json("ctl", "models")], 15,
               "flux-schnell added")

    listed = server.ctl("ctl", "model", "presets")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "MAKES", "CARD", "STATE"]
    assert "flux-schnell  pictures  1 GPU with 20.0 GB free each  in the catalog" in listed.stdout
    assert "sdxl-turbo    pictures  1 GPU with 10.0 GB free each  made by another" in listed.stdout
    assert "sdxl-turbo: SDXL-Turbo: 512 × 512 pictures in 4 steps, non-commercial; flux-schnell makes pictures " \
           "already" in listed.stdout
    assert "presets.auto is on" in listed.stdout
    model = server.ctl_json("ctl", "model", "show", "flux-schnell")
    assert model["state"] == "on demand" and model["replicas"]["running"] == 0  # nothing fetched until asked
    assert model["spec"]["source"].endswith("@" + hub.flux.main)  # pinned to the commit the hub had
    (entry,) = server.ctl_json("ctl", "audit", "--target", "model:flux-schnell")
    assert (entry["actor"], entry["action"]) == ("llmgw (presets)", "model.add")


def test_a_removed_preset_stays_out_until_added_by_hand_and_auto_turns_off(server, hub):
    put_gpu_node(server, "gpu-b", 12)
    assert server.ctl("ctl", "config", "set", "hub.endpoint", hub.url).returncode == 0
    wait_until(lambda: "sdxl-turbo" in [m["name"] for m in server.ctl_json("ctl", "models")], 15,
               "sdxl-turbo added where only it fits")
    assert _states(server) == {"flux-schnell": "made", "sdxl-turbo": "in_catalog"}

    removed = server.ctl("ctl", "model", "remove", "sdxl-turbo")
    assert removed.returncode == 0
    assert "sdxl-turbo is one of llmgw's presets: it is in presets.declined now" in removed.stdout
    assert server.ctl_json("ctl", "config", "get", "presets.declined")["value"] == ["sdxl-turbo"]
    assert _states(server) == {"flux-schnell": "kind_declined", "sdxl-turbo": "declined"}

    added = server.ctl("ctl", "model", "presets", "add", "sdxl-turbo")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("sdxl-turbo: on demand, version 1") and "taken off presets.declined" in added.stdout
    assert server.ctl_json("ctl", "config", "get", "presets.declined")["value"] == []

    off = server.ctl("ctl", "model", "presets", "auto", "off")
    assert (off.returncode, off.stdout) == (0, "presets.auto: off\n")
    assert server.ctl_json("ctl", "config", "get", "presets.auto")["value"] is False
    assert "presets.auto is off" in server.ctl("ctl", "model", "presets").stdout

    # A name that is no preset is refused with the ones there are; a switch that is neither on nor off is a usage error.
    unknown = server.ctl("ctl", "model", "presets", "add", "flux")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "llmgw: llmgw has no preset named flux; its presets are flux-schnell, sdxl-turbo"
    assert server.ctl("ctl", "model", "presets", "auto", "maybe").returncode == 2
