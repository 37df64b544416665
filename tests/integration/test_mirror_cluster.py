"""The model mirror with real processes (issue 27, "The mirror"): a control plane that pins a model from the hub
and tells its mirrors, two `llmgw mirror serve` kept in step, and a node that fetches from them only.

The hub is tests/support/hfhub.py in this process; the mirrors serve with the control plane's own certificate,
as they do on its machine; the node's own hf_endpoint leads nowhere, so a fetch that went past the mirrors
would fail.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest
from test_cluster import _answers, _ready_on, cluster  # noqa: F401 - the fixture
from test_hub_pinning import _pinned, _serve

from llmgw.mirror import MirrorClient, MirrorError, client_context
from tests.fixtures.tinygguf import write_tiny_gguf
from tests.support.hfhub import Hub, big_file
from tests.support.mirrors import Certs, MirrorProcess, mirror_config
from tests.support.waiting import wait_for

NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def hub():
    with Hub().threaded() as hub:
        yield hub


def _listing(cfg) -> dict:
    return asyncio.run(MirrorClient(f"https://127.0.0.1:{cfg.listen.port}", client_context(cfg)).files())


def _held(cfg, name: str) -> bool:
    try:
        return any(f["path"] == name and f["state"] == "held" for f in _listing(cfg)["files"])
    except MirrorError:  # not listening yet, or restarting
        return False


def _set(cluster, key: str, value: str) -> None:
    done = cluster.ctl("ctl", "config", "set", key, value)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_model_added_is_fetched_into_both_mirrors_and_a_node_is_served_by_the_peer_when_the_first_is_killed(
        cluster, hub, tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf").read_bytes()
    hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": model})
    _pinned(cluster, hub)
    first_cfg = mirror_config(tmp_path / "m1", cluster.data_dir, hub.url, port=_port())
    first = MirrorProcess(first_cfg, tmp_path / "m1.yaml")
    # The second reaches no hub: what it has, it copied from the first, checked.
    second_cfg = mirror_config(tmp_path / "m2", cluster.data_dir, NOWHERE, [first.url], port=_port(),
                               peer_interval=1)
    second = MirrorProcess(second_cfg, tmp_path / "m2.yaml")
    try:
        _set(cluster, "mirror.read_every", "1s")
        _set(cluster, "mirror.url", first.url)
        _set(cluster, "mirror.peers", f"[{second.url}]")
        added = _serve(cluster)
        assert added.returncode == 0, added.stdout + added.stderr

        # The leader told the first of the catalog's pin; the second copied it from the first.
        assert wait_for(lambda: _held(first_cfg, "tiny.gguf"), timeout=60, interval=0.3)[0], first.stop()
        assert wait_for(lambda: _held(second_cfg, "tiny.gguf"), timeout=60, interval=0.3)[0], second.stop()
        [row] = [f for f in _listing(second_cfg)["files"] if f["path"] == "tiny.gguf"]
        assert row["sha256"] == hashlib.sha256(model).hexdigest() and row["models"] == ["tiny"]
        assert row["origin"] == first.url

        first.kill()
        cluster.agent("node-a", weights={"hf_endpoint": NOWHERE})
        ready, _ = wait_for(lambda: _ready_on(cluster, "tiny"), timeout=120, interval=0.5)
        assert ready, cluster.output()
        text, _ = wait_for(lambda: _answers(cluster, "tiny"), timeout=30, interval=0.5)
        assert text and text.strip()
        # The hub sent the model's bytes once, to the first mirror; the node never asked it.
        assert hub.bytes_served("/cdn/*") == len(model)
        assert hub.count("resolve", path="/Qwen/Tiny-GGUF/resolve/*") == 1
        shown = cluster.ctl_json("ctl", "config", "get", "mirror")["value"]
        assert shown["url"] == first.url and shown["peers"] == [second.url]
    finally:
        first.kill()
        second.stop()


def test_a_mirror_killed_mid_download_carries_on_from_where_it_got_to_and_keeps_the_file_checked(hub, tmp_path):
    weights = big_file(12_000_000, seed=11)
    hub.repo("Qwen/Big-Weights", files={"big.onnx": weights})
    # The hub stops sending past the first 4 MB the mirror writes at once, long enough for it to be killed there.
    hub.stall_next("/cdn/*", after_bytes=6_000_000, seconds=8)
    # The certificates a control plane makes; no control plane is needed to fetch into a mirror by hand.
    cfg = mirror_config(tmp_path / "m1", Certs(tmp_path / "certs").control_plane("cp1"), hub.url, port=_port())
    mirror = MirrorProcess(cfg, tmp_path / "m1.yaml")
    adding = MirrorProcess.command(cfg, tmp_path / "m1.yaml", "add", "hf:Qwen/Big-Weights/big.onnx")
    try:
        arrived, _ = wait_for(lambda: _part_size(tmp_path / "m1") >= 4_000_000, timeout=30, interval=0.1)
        assert arrived
        mirror.kill()
        adding.wait(timeout=30)
        mirror = MirrorProcess(cfg, tmp_path / "m1.yaml")
        done = MirrorProcess.command(cfg, tmp_path / "m1.yaml", "add", "hf:Qwen/Big-Weights/big.onnx")
        out, err = done.communicate(timeout=60)
        assert done.returncode == 0, out + err
        assert "kept Qwen/Big-Weights/" in out and "checked" in out
        kept = next((tmp_path / "m1" / "files" / "Qwen" / "Big-Weights").rglob("big.onnx"))
        assert kept.read_bytes() == weights
        # The second fetch asked for the rest only.
        ranged = [h for h in hub.hits if h.kind == "cdn" and h.range]
        assert ranged and ranged[-1].range.startswith("bytes=") and int(ranged[-1].range[6:].split("-")[0]) >= 4_000_000
    finally:
        mirror.kill()


def _part_size(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob(".*.part"))


def _port() -> int:
    from tests.support.pgcluster import free_port

    return free_port()


def test_an_air_gapped_site_imports_a_cache_carried_in_and_pins_and_serves_from_the_mirror(cluster, tmp_path):
    from huggingface_hub import snapshot_download

    model = write_tiny_gguf(tmp_path / "tiny.gguf").read_bytes()
    # Elsewhere, with a way to Hugging Face: the public client's own cache, carried in on a disk.
    outside = Hub()
    commit = outside.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": model}).main
    with outside.threaded():
        snapshot_download("Qwen/Tiny-GGUF", cache_dir=str(tmp_path / "disk"), endpoint=outside.url, token=False)
    # Here, nothing reaches a hub: not the mirror, not the control plane, not the node.
    cfg = mirror_config(tmp_path / "m1", cluster.data_dir, NOWHERE, port=_port())
    mirror = MirrorProcess(cfg, tmp_path / "m1.yaml")
    try:
        imported = MirrorProcess.command(cfg, tmp_path / "m1.yaml", "import", str(tmp_path / "disk"))
        out, err = imported.communicate(timeout=60)
        assert imported.returncode == 0, out + err
        assert f"imported Qwen/Tiny-GGUF/{commit}/tiny.gguf, checked" in out
        _set(cluster, "mirror.url", mirror.url)
        _set(cluster, "hub.endpoint", mirror.url)
        added = _serve(cluster)
        assert added.returncode == 0, added.stdout + added.stderr
        assert f"pinned to commit {commit[:12]} of Qwen/Tiny-GGUF" in added.stdout
        spec = cluster.ctl_json("ctl", "model", "show", "tiny")["spec"]
        assert spec["sha256"] == hashlib.sha256(model).hexdigest() and spec["origin"]["hub"] == mirror.url

        cluster.agent("node-a", weights={"hf_endpoint": NOWHERE})
        ready, _ = wait_for(lambda: _ready_on(cluster, "tiny"), timeout=120, interval=0.5)
        assert ready, cluster.output()
        text, _ = wait_for(lambda: _answers(cluster, "tiny"), timeout=30, interval=0.5)
        assert text and text.strip()
    finally:
        mirror.kill()


def test_a_mirror_down_while_its_peer_removed_a_file_removes_it_once_back_and_neither_copies_it_back(hub, tmp_path):
    hub.repo("Qwen/Two-Files", files={"a.gguf": write_tiny_gguf(tmp_path / "a.gguf").read_bytes(),
                                      "b.gguf": write_tiny_gguf(tmp_path / "b.gguf", seed=1).read_bytes()})
    commit = hub.repos["Qwen/Two-Files"].main
    certs = Certs(tmp_path / "certs")
    first_port, second_port = _port(), _port()
    first_cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url,
                              [f"https://127.0.0.1:{second_port}"], port=first_port, peer_interval=1)
    second_cfg = mirror_config(tmp_path / "m2", certs.control_plane("cp2"), NOWHERE,
                               [f"https://127.0.0.1:{first_port}"], port=second_port, peer_interval=1)
    first = MirrorProcess(first_cfg, tmp_path / "m1.yaml")
    second = MirrorProcess(second_cfg, tmp_path / "m2.yaml")
    try:
        added = MirrorProcess.command(first_cfg, tmp_path / "m1.yaml", "add", "hf:Qwen/Two-Files")
        out, err = added.communicate(timeout=60)
        assert added.returncode == 0, out + err
        assert wait_for(lambda: _held(second_cfg, "a.gguf") and _held(second_cfg, "b.gguf"), timeout=30,
                        interval=0.3)[0]
        second.stop()
        removed = MirrorProcess.command(first_cfg, tmp_path / "m1.yaml", "remove",
                                        f"Qwen/Two-Files/{commit}/b.gguf")
        out, err = removed.communicate(timeout=60)
        assert removed.returncode == 0 and f"removed Qwen/Two-Files/{commit}/b.gguf" in out, out + err
        second = MirrorProcess(second_cfg, tmp_path / "m2.yaml")
        assert wait_for(lambda: not _held(second_cfg, "b.gguf"), timeout=30, interval=0.3)[0]
        assert not (tmp_path / "m2" / "files" / "Qwen" / "Two-Files" / commit / "b.gguf").exists()
        # The first remembers the removal; several reads each way later (every second), neither has it back.
        first_state = asyncio.run(MirrorClient(f"https://127.0.0.1:{first_port}",
                                               client_context(first_cfg)).state())
        assert first_state["removed"][f"Qwen/Two-Files/{commit}/b.gguf"] > 0
        time.sleep(3)
        assert _held(first_cfg, "a.gguf") and _held(second_cfg, "a.gguf")
        assert not _held(first_cfg, "b.gguf") and not _held(second_cfg, "b.gguf")
    finally:
        first.kill()
        second.kill()
