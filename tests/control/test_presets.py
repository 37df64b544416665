"""llmgw's presets: each loads as a catalog model, and the leader's pass adds one only where it should.

The pass runs over a real store (both dialects) with the cluster's settings in it, and pins through a hub that
speaks Hugging Face's API (tests/support/hfhub.py); nodes are written to the store as the leader records them when
their agents register.
"""

from __future__ import annotations

import time

import pytest

from llmgw.account import Actor
from llmgw.config import ClusterSettings, HubSettings, PresetSettings, from_dict
from llmgw.control.catalog import NodeView, load_spec
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.presets import PRESETS, judge
from llmgw.control.catalog.service import Catalog
from llmgw.control.presets import Presets
from llmgw.control.settings import ClusterSettingsWatcher
from llmgw.engines import load_workflow
from llmgw.protocol import GPU, Heartbeat, Host, Register, to_dict
from llmgw.store import AuditEntry, NodeRecord
from tests.support.hfhub import Hub, safetensors_bytes
from tests.support.pgcluster import free_port

ALICE = Actor("alice", "cli")
WEIGHTS = safetensors_bytes()


@pytest.fixture
async def hub():
    hub = await Hub().start()
    hub.flux = hub.repo("Comfy-Org/flux1-schnell", files={"flux1-schnell-fp8.safetensors": WEIGHTS})
    hub.repo("stabilityai/sdxl-turbo", files={"sd_xl_turbo_1.0_fp16.safetensors": WEIGHTS})
    yield hub
    await hub.stop()


@pytest.fixture
async def cluster(store, hub):
    """(the presets service, its settings) over `store`, the hub in hub.endpoint."""
    settings = ClusterSettingsWatcher(store)
    await settings.load(ClusterSettings(hub=HubSettings(endpoint=hub.url)), [])

    async def audit(actor, action, target, before, after):
        await store.add_audit(AuditEntry(time.time(), actor.name, actor.via, action, target, before, after))

    catalog = Catalog(store, audit, hub=lambda: settings.current.hub)
    return Presets(store, lambda: catalog, settings, leading=lambda: True), settings


async def put_node(store, name: str, cards_gb=(), engines=("comfyui", "llamacpp"), seen: float | None = None):
    now = time.time() if seen is None else seen
    register = Register(node_id=f"id-{name}", name=name, version="test", engines={e: "1" for e in engines},
                        host=Host(hostname=name, cpu_cores=16, cpu_threads=16, memory_mb=64 * 1024),
                        gpus=[GPU(index=i, name="NVIDIA L4", memory_mb=int(gb * 1024), compute_capability="8.9")
                              for i, gb in enumerate(cards_gb)])
    await store.put_node(NodeRecord(f"id-{name}", name, to_dict(register), heartbeat=to_dict(Heartbeat(at=now)),
                                    heartbeat_at=now, state="connected", first_seen=now, updated_at=now))


def states(view) -> dict[str, str]:
    return {p["name"]: p["state"] for p in view["presets"]}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_is_a_catalog_model_on_one_card_that_loads_on_demand(preset):
    spec = load_spec(preset.document())
    assert spec.name == preset.name and spec.source.startswith("hf:") and "@" not in spec.source
    (profile,) = spec.profiles
    assert profile.engine == "comfyui" and profile.gpus is not None and profile.gpus.count == 1
    assert int(profile.gpus.memory) > 0  # a figure, not the whole card: a 24 GB card shares with others
    assert spec.scaling.min == 0 and spec.scaling.on_demand is not None
    assert spec.can() == ("images", "workflows") and preset.makes == "pictures"
    assert spec.comfyui is not None and spec.comfyui.license is not None and spec.comfyui.license.id
    flow = load_workflow(spec.comfyui)
    sampler = flow.fill({"prompt": "a lighthouse"}, "x.safetensors")["3"]["inputs"]
    assert (sampler["steps"], sampler["cfg"]) == (4, 1.0)


def test_flux_schnell_samples_as_its_makers_say_and_sdxl_turbo_at_its_own_size():
    flux, turbo = (load_workflow(load_spec(p.document()).comfyui) for p in PRESETS)
    assert flux.fill({"prompt": "x"}, "f")["3"]["inputs"]["scheduler"] == "simple"
    graph = turbo.fill({"prompt": "x"}, "t")
    assert graph["5"]["inputs"]["width"] == graph["5"]["inputs"]["height"] == 512
    assert graph["3"]["inputs"]["sampler_name"] == "euler_ancestral"


async def test_a_node_with_comfyui_and_a_24_gb_card_gets_flux_schnell_pinned_and_audited_as_llmgw(cluster, store,
                                                                                                 hub):
    presets, _ = cluster
    await put_node(store, "gpu-a", cards_gb=[24])

    assert await presets.run_pass() == ["flux-schnell"]

    record = await store.get_model("flux-schnell")
    commit = hub.flux.main
    assert record.spec["source"] == f"hf:Comfy-Org/flux1-schnell/flux1-schnell-fp8.safetensors@{commit}"
    assert record.spec["origin"]["trusted_by"] == "llmgw (presets)"
    assert record.spec["scaling"] == {"min": 0, "max": 0, "on_demand": {"evict_after_idle": "2m",
                                                                         "min_lifetime": "5m"}}
    (entry,) = [e for e in await store.list_audit() if e.target.startswith("model:")]
    assert (entry.actor, entry.via, entry.action, entry.target) == ("llmgw (presets)", "presets", "model.add",
                                                                   "model:flux-schnell")
    # One picture model is enough: the catalog makes pictures now, and a second pass adds nothing.
    assert states(await presets.view()) == {"flux-schnell": "in_catalog", "sdxl-turbo": "made"}
    assert await presets.run_pass() == []


async def test_a_12_gb_card_gets_sdxl_turbo_and_flux_schnell_fits_no_node(cluster, store):
    presets, _ = cluster
    await put_node(store, "gpu-b", cards_gb=[12])

    view = await presets.view()
    assert states(view) == {"flux-schnell": "no_node", "sdxl-turbo": "to_add"}
    flux = view["presets"][0]
    assert flux["said"] == "fits no node: none of gpu-b with ComfyUI has 1 GPU with 20.0 GB free each and 20.0 GB of " \
                           "memory"
    assert await presets.run_pass() == ["sdxl-turbo"]


async def test_nothing_is_added_without_a_node_offering_comfyui_however_large_its_cards(cluster, store):
    presets, _ = cluster
    await put_node(store, "gpu-c", cards_gb=[80, 80], engines=("llamacpp", "vllm"))
    await put_node(store, "gone", cards_gb=[80], seen=time.time() - 3600)  # lost an hour ago

    assert await presets.run_pass() == []
    said = (await presets.view())["presets"][0]["said"]
    assert said == "fits no node: none offers ComfyUI (engines.comfyui.dir in a node's agent.yaml)"
    assert await store.list_models() == []


async def test_with_presets_auto_off_a_preset_that_fits_is_only_said_to_fit(cluster, store):
    presets, settings = cluster
    await put_node(store, "gpu-a", cards_gb=[24])
    await presets.set_auto(ALICE, False)

    assert await presets.run_pass() == []
    view = await presets.view()
    assert view["auto"] is False and states(view)["flux-schnell"] == "fits"
    assert "llmgw ctl model presets add flux-schnell adds it" in view["presets"][0]["said"]
    assert await store.list_models() == []


async def test_a_picture_model_already_in_the_catalog_keeps_the_presets_out(cluster, store):
    presets, _ = cluster
    await put_node(store, "gpu-a", cards_gb=[24])
    mine = {"name": "my-pictures", "source": "/models/mine.safetensors",
            "profiles": [{"engine": "comfyui", "gpus": {"count": 1, "memory": "8GB"}}],
            "comfyui": {"workflow": "text-to-image"}}
    await presets.catalog().add(ALICE, mine)

    assert await presets.run_pass() == []
    view = await presets.view()
    assert states(view) == {"flux-schnell": "made", "sdxl-turbo": "made"}
    assert view["presets"][0]["said"] == "my-pictures makes pictures already"


async def test_a_removed_preset_is_declined_and_neither_it_nor_another_of_its_kind_comes_back(cluster, store):
    presets, settings = cluster
    await put_node(store, "gpu-a", cards_gb=[24])
    assert await presets.run_pass() == ["flux-schnell"]

    await presets.catalog().remove(ALICE, "flux-schnell")
    said = await presets.removed(ALICE, "flux-schnell")

    assert "flux-schnell is one of llmgw's presets: it is in presets.declined now" in said
    assert settings.current.presets.declined == ["flux-schnell"]
    assert await presets.run_pass() == []
    assert states(await presets.view()) == {"flux-schnell": "declined", "sdxl-turbo": "kind_declined"}
    # The change to the settings is the administrator's, in the audit log.
    declined = [e for e in await store.list_audit() if e.action == "config.set"]
    assert declined[0].actor == "alice" and declined[0].after == {"presets.declined": ["flux-schnell"]}


async def test_a_preset_added_by_hand_is_taken_off_declined(cluster, store):
    presets, settings = cluster
    await presets.removed(ALICE, "sdxl-turbo")
    assert settings.current.presets.declined == ["sdxl-turbo"]

    added = await presets.add(ALICE, "sdxl-turbo")

    assert added["model"]["name"] == "sdxl-turbo" and "taken off presets.declined" in added["notes"]
    assert settings.current.presets.declined == []
    with pytest.raises(Refusal, match="llmgw has no preset named flux; its presets are flux-schnell, sdxl-turbo"):
        await presets.add(ALICE, "flux")


async def test_a_hub_that_does_not_answer_adds_nothing_and_says_why(cluster, store):
    presets, settings = cluster
    await put_node(store, "gpu-a", cards_gb=[24])
    closed = f"http://127.0.0.1:{free_port()}"
    await settings.change("alice", "cli", set_={"hub.endpoint": closed})

    assert await presets.run_pass() == []
    assert await store.list_models() == []
    flux = (await presets.view())["presets"][0]
    assert flux["state"] == "to_add" and flux["error"].startswith(f"could not reach Hugging Face at {closed}")
    with pytest.raises(Refusal, match="could not reach Hugging Face"):
        await presets.add(ALICE, "flux-schnell")


def test_the_declined_setting_takes_only_names():
    settings = from_dict(ClusterSettings, {"presets": {"declined": ["flux-schnell"]}})
    assert settings.presets == PresetSettings(auto=True, declined=["flux-schnell"])
    with pytest.raises(Exception, match=r"presets.declined\[0\]: \"Flux Schnell\" is not a preset's name"):
        from_dict(ClusterSettings, {"presets": {"declined": ["Flux Schnell"]}})


def test_a_preset_to_be_added_counts_as_making_its_kind_for_those_after_it():
    register = Register(node_id="id-big", name="big", version="test", engines={"comfyui": "1"},
                        host=Host(hostname="big", cpu_cores=32, memory_mb=256 * 1024),
                        gpus=[GPU(index=0, name="NVIDIA H100", memory_mb=80 * 1024, compute_capability="9.0")])

    verdicts = judge(True, [], {}, [NodeView.of(register, Heartbeat(at=time.time()))])
    assert [(v.name, v.state) for v in verdicts] == [("flux-schnell", "to_add"), ("sdxl-turbo", "made")]
    assert verdicts[1].said == "flux-schnell (to be added) makes pictures already"
