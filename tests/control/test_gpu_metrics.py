"""Each card's work on the control plane's /metrics, from the agents' heartbeats.

The readings start as NVML answers in the form a real driver gives them
(tests/agent/discovery/fakenvml.py: an H100 SXM node with GPM, an A100 in
MIG mode), go through the agent's Discovery and the protocol's JSON as a
heartbeat does, and come out of the leader's collector as Prometheus text,
read back with prometheus_client's own parser.
"""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.agent.discovery import Discovery
from llmgw.config.agent import DiscoverySettings
from llmgw.control.agentsvc import AgentService, Node
from llmgw.control.clustermetrics import ClusterCollector
from llmgw.protocol import Heartbeat, Register, decode, encode, to_dict
from tests.agent.discovery.fakenvml import FakeCard, FakeMIG, FakeNVML

MiB = 1024 * 1024
SETTINGS = DiscoverySettings(dcgm_exporter="off", nvidia_smi="/nonexistent/nvidia-smi")
GPU_FAMILIES = {"llmgw_gpu_utilization_ratio", "llmgw_gpu_memory_used_bytes", "llmgw_gpu_memory_total_bytes",
                "llmgw_gpu_power_watts", "llmgw_gpu_power_limit_watts", "llmgw_gpu_temperature_celsius",
                "llmgw_gpu_sm_active_ratio", "llmgw_gpu_sm_occupancy_ratio", "llmgw_gpu_tensor_active_ratio",
                "llmgw_gpu_dram_active_ratio"}


def h100(i: int, **kw) -> FakeCard:
    return FakeCard(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-h100-{i}", bus=f"00000000:{0x18 + i:02X}:00.0",
                    total_mb=81559, cc=(9, 0), **kw)


def what_the_agent_sends(name: str, cards: list[FakeCard], tmp_path, samples: int = 2) -> tuple[Register, Heartbeat]:
    """The Register and the latest Heartbeat a node with these cards sends, as the control plane decodes them."""
    d = Discovery(SETTINGS, [str(tmp_path)], measure_bandwidth=False, nvml_lib=FakeNVML(cards),
                  driver_marker=str(tmp_path / "no-driver"), sysfs=str(tmp_path / "sys"))
    host, gpus, storage = d.register_parts()
    for _ in range(samples):  # GPM measures between two samples
        beat = d.sample()
    d.close()
    register = decode(encode(Register(node_id=f"id-{name}", name=name, version="1", host=host, gpus=gpus,
                                      storage=storage)))
    return register, decode(encode(beat))


class Leader:
    """The leader's agents and its collector, with nodes put in as the agent service keeps them."""

    def __init__(self) -> None:
        self.leading = True
        self.agents = AgentService(address="127.0.0.1:7443", leading=lambda: self.leading, leader=lambda: "",
                                   control_planes=lambda: [], peer_id=lambda request: None)
        self.registry = CollectorRegistry()
        self.registry.register(ClusterCollector(self.agents, SimpleNamespace(replicas={}), lambda: self.leading))

    def add(self, register: Register, beat: Heartbeat | None) -> Node:
        node = self.agents.nodes[register.node_id] = Node(register.node_id, register, link=object(), heartbeat=beat)
        return node

    def scrape(self) -> dict[str, dict[tuple[str, str], float]]:
        """Each llmgw_gpu_* family's samples as {(node, gpu): value}, every announced family present."""
        out: dict[str, dict[tuple[str, str], float]] = {}
        for family in text_string_to_metric_families(generate_latest(self.registry).decode()):
            if family.name.startswith("llmgw_gpu_"):
                out[family.name] = {(s.labels["node"], s.labels["gpu"]): s.value for s in family.samples}
        return out


def test_each_card_is_exported_by_node_and_index_with_prometheus_units(tmp_path):
    busy = h100(0, used_mb=23000, util=92, temp=71, power_mw=239520, gpm={2: 69.0, 3: 45.5, 5: 12.25, 10: 30.0})
    idle = h100(1, used_mb=512, util=0, temp=33, power_mw=71000)
    leader = Leader()
    leader.add(*what_the_agent_sends("gpu-1", [busy, idle], tmp_path))

    m = leader.scrape()

    assert set(m) == GPU_FAMILIES
    assert m["llmgw_gpu_utilization_ratio"] == {("gpu-1", "0"): 0.92, ("gpu-1", "1"): 0.0}
    assert m["llmgw_gpu_memory_used_bytes"] == {("gpu-1", "0"): 23000 * MiB, ("gpu-1", "1"): 512 * MiB}
    assert m["llmgw_gpu_memory_total_bytes"] == {("gpu-1", "0"): 81559 * MiB, ("gpu-1", "1"): 81559 * MiB}
    assert m["llmgw_gpu_power_watts"] == {("gpu-1", "0"): 239.5, ("gpu-1", "1"): 71.0}
    assert m["llmgw_gpu_power_limit_watts"] == {("gpu-1", "0"): 700.0, ("gpu-1", "1"): 700.0}
    assert m["llmgw_gpu_temperature_celsius"] == {("gpu-1", "0"): 71.0, ("gpu-1", "1"): 33.0}
    # GPM only on the card that has it: the idle card has no series rather than a 0 that reads as idle SMs.
    assert m["llmgw_gpu_sm_active_ratio"] == {("gpu-1", "0"): 0.69}
    assert m["llmgw_gpu_sm_occupancy_ratio"] == {("gpu-1", "0"): 0.455}
    assert m["llmgw_gpu_tensor_active_ratio"] == {("gpu-1", "0"): 0.1225}
    assert m["llmgw_gpu_dram_active_ratio"] == {("gpu-1", "0"): 0.3}


def test_a_lost_nodes_cards_stop_being_exported_and_the_others_stay(tmp_path):
    leader = Leader()
    lost = leader.add(*what_the_agent_sends("gpu-1", [h100(0, util=50)], tmp_path / "a"))
    leader.add(*what_the_agent_sends("gpu-2", [h100(0, util=10)], tmp_path / "b"))
    assert leader.scrape()["llmgw_gpu_utilization_ratio"] == {("gpu-1", "0"): 0.5, ("gpu-2", "0"): 0.1}

    lost.link = None  # what the agent service does when the node's WebSocket goes

    m = leader.scrape()
    assert set(m) == GPU_FAMILIES  # still announced, for the dashboard's queries
    assert all(node == "gpu-2" for samples in m.values() for node, _ in samples)
    assert m["llmgw_gpu_utilization_ratio"] == {("gpu-2", "0"): 0.1}


def test_a_standby_exports_no_card_and_a_node_not_yet_heard_from_has_none(tmp_path):
    leader = Leader()
    register, _ = what_the_agent_sends("gpu-1", [h100(0)], tmp_path)
    leader.add(register, None)  # registered, first heartbeat not yet in
    assert set(leader.scrape()) == GPU_FAMILIES
    assert not any(leader.scrape().values())

    leader.leading = False
    assert leader.scrape() == {}


def test_a_heartbeat_from_an_agent_without_the_power_limit_still_decodes_and_leaves_the_limit_out(tmp_path):
    leader = Leader()
    register, beat = what_the_agent_sends("gpu-1", [h100(0, power_mw=239520)], tmp_path)
    older = to_dict(beat)
    for card in older["gpus"]:
        del card["power_limit_w"]  # as an agent from before the field sends it
    leader.add(register, decode(orjson.dumps({"type": "heartbeat", "body": older})))

    m = leader.scrape()

    assert m["llmgw_gpu_power_watts"] == {("gpu-1", "0"): 239.5}
    assert m["llmgw_gpu_power_limit_watts"] == {}


def test_a_mig_instance_shows_its_memory_and_nothing_no_driver_measures_per_instance(tmp_path):
    a100 = FakeCard(name="NVIDIA A100-SXM4-80GB", uuid="GPU-a100", bus="00000000:17:00.0", total_mb=81920, cc=(8, 0),
                    migs=[FakeMIG("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "MIG-aaa", 40192, 37, 2, 0)])
    leader = Leader()
    leader.add(*what_the_agent_sends("mig-1", [a100], tmp_path))

    m = leader.scrape()

    assert m["llmgw_gpu_memory_used_bytes"] == {("mig-1", "1000"): 37 * MiB}
    assert m["llmgw_gpu_memory_total_bytes"] == {("mig-1", "1000"): 40192 * MiB}
    for name in GPU_FAMILIES - {"llmgw_gpu_memory_used_bytes", "llmgw_gpu_memory_total_bytes"}:
        assert m[name] == {}, name
