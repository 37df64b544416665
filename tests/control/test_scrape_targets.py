"""/prometheus/targets: every machine of the cluster once, for Prometheus's HTTP service discovery, on both stores."""

from __future__ import annotations

from llmgw.control.scrapetargets import ScrapeTargets, host_of
from llmgw.store.records import ControlPlaneAddress, NodeRecord


def _register(name: str, *, advertise: str = "", hostname: str = "") -> dict:
    register = {"node_id": name, "name": name, "version": "1", "host": {"hostname": hostname or name}}
    if advertise:
        register["advertise"] = advertise
    return register


async def test_every_machine_is_listed_once_at_its_node_exporter_with_what_it_is(store):
    await store.put_control_plane(ControlPlaneAddress("cp-1", "10.0.0.5:7443", 1.0))
    await store.put_control_plane(ControlPlaneAddress("cp-2", "10.0.0.6:7443", 2.0))
    await store.put_node(NodeRecord("n-gpu1", "gpu1", _register("gpu1", advertise="10.0.0.21")))
    # A node on a control plane's machine is one machine with both roles; an agent older than `advertise`
    # is listed by the host name it reported.
    await store.put_node(NodeRecord("n-cp", "cpnode", _register("cpnode", advertise="10.0.0.5")))
    await store.put_node(NodeRecord("n-old", "old", _register("old", hostname="old.example.com")))
    url = "postgresql://llmgw:pw@10.0.0.6:5432,10.0.0.7:5432/llmgw?target_session_attrs=read-write"

    groups = await ScrapeTargets(store, url).groups()

    assert groups == [
        {"targets": ["10.0.0.21:9100"], "labels": {"node": "gpu1", "llmgw_role": "node"}},
        {"targets": ["10.0.0.5:9100"], "labels": {"node": "cp-1", "llmgw_role": "control-plane,node"}},
        {"targets": ["10.0.0.6:9100"], "labels": {"node": "cp-2", "llmgw_role": "control-plane,store"}},
        {"targets": ["10.0.0.7:9100"], "labels": {"node": "10.0.0.7", "llmgw_role": "store"}},
        {"targets": ["old.example.com:9100"], "labels": {"node": "old", "llmgw_role": "node"}},
    ]
    assert "pw" not in repr(groups)


async def test_a_node_added_later_is_listed_once_the_list_is_read_again_and_a_store_gone_leaves_the_last_list(store):
    now = [0.0]
    targets = ScrapeTargets(store, "", clock=lambda: now[0])
    await store.put_control_plane(ControlPlaneAddress("cp-1", "[fd00::5]:7443", 1.0))
    first = await targets.groups()
    assert first == [{"targets": ["[fd00::5]:9100"], "labels": {"node": "cp-1", "llmgw_role": "control-plane"}}]

    await store.put_node(NodeRecord("n-1", "gpu1", _register("gpu1", advertise="10.0.0.21")))
    assert await targets.groups() == first  # read at most every 30 s, however often Prometheus asks
    now[0] = 31.0
    assert [g["labels"]["node"] for g in await targets.groups()] == ["gpu1", "cp-1"]

    await store.close()
    now[0] = 62.0
    assert [g["labels"]["node"] for g in await targets.groups()] == ["gpu1", "cp-1"]


def test_a_host_is_read_from_every_form_an_address_takes():
    assert [host_of(a) for a in ("10.0.0.5:7443", "[fd00::5]:7443", "gpu1", "http://10.0.0.9:8080/v1", "fd00::7", "")] \
        == ["10.0.0.5", "fd00::5", "gpu1", "10.0.0.9", "fd00::7", ""]
