"""Models from a Hugging Face hub, end to end: a real control plane pins what is added, a real node fetches the
pinned commit from the hub and checks it (issue 27, "Pinned and checked against Hugging Face").

The hub is tests/support/hfhub.py in this process (its knobs stay in the test's hands), which the public
huggingface_hub client is tested against; the control plane asks it through hub.endpoint, the node through
its own weights.hf_endpoint.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from test_cluster import _answers, _ready_on, _replicas, cluster  # noqa: F401 - the fixture

from tests.fixtures.tinygguf import write_tiny_gguf
from tests.fixtures.tinyllama import write_tiny_llama
from tests.support.hfhub import Hub
from tests.support.pgcluster import free_port
from tests.support.waiting import wait_for

SOURCE = "hf:Qwen/Tiny-GGUF/tiny.gguf"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def hub():
    with Hub().threaded() as hub:
        yield hub


@pytest.fixture
def tiny(tmp_path) -> tuple[bytes, bytes]:
    """The tiny model llama.cpp serves, and another of the same size that is not it."""
    return (write_tiny_gguf(tmp_path / "one.gguf").read_bytes(),
            write_tiny_gguf(tmp_path / "two.gguf", seed=1).read_bytes())


def _pinned(cluster, hub) -> None:
    done = cluster.ctl("ctl", "config", "set", "hub.endpoint", hub.url)
    assert done.returncode == 0, done.stderr


def _serve(cluster, *extra: str):
    return cluster.ctl("ctl", "model", "serve", SOURCE, "--engine", "llamacpp", "--context", "512",
                       "--cores", "1", "--memory", "512MB", *extra)


def test_a_push_upstream_after_the_model_was_added_does_not_reach_the_node(cluster, hub, tiny):
    one, two = tiny
    repo = hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": one})
    first = repo.main
    _pinned(cluster, hub)
    added = _serve(cluster)
    assert added.returncode == 0, added.stdout + added.stderr
    assert f"pinned to commit {first[:12]} of Qwen/Tiny-GGUF (main now)" in added.stdout
    hub.replace("Qwen/Tiny-GGUF", "tiny.gguf", two)  # upstream moves before any node has fetched it

    cluster.agent("node-a", weights={"hf_endpoint": hub.url})
    ready, _ = wait_for(lambda: _ready_on(cluster, "tiny"), timeout=120, interval=0.5)
    assert ready, cluster.output()
    text, _ = wait_for(lambda: _answers(cluster, "tiny"), timeout=30, interval=0.5)
    assert text and text.strip()
    # The node asked for the pinned commit and was sent its bytes, never the new file's.
    assert hub.count("resolve", path=f"/Qwen/Tiny-GGUF/resolve/{first}/tiny.gguf") >= 1
    assert hub.bytes_served(f"/cdn/Qwen/Tiny-GGUF/{sha(two)}/*") == 0

    said = cluster.ctl("ctl", "model", "update", "tiny")
    assert said.returncode == 0, said.stderr
    assert f"tiny: pinned to {first[:12]} of Qwen/Tiny-GGUF; main is now {repo.main[:12]}" in said.stdout
    assert f"tiny.gguf: sha256 {sha(one)[:12]}… -> {sha(two)[:12]}…" in said.stdout
    assert "llmgw ctl model update tiny --apply moves it" in said.stdout


def test_a_file_that_differs_from_what_the_hub_publishes_is_refused_by_the_node_naming_both(cluster, hub, tiny):
    one, two = tiny
    hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": one})
    _pinned(cluster, hub)
    assert _serve(cluster).returncode == 0
    hub.tamper("Qwen/Tiny-GGUF", "tiny.gguf", two)  # the bytes a node is handed are not the ones published

    node = cluster.agent("node-a", weights={"hf_endpoint": hub.url})

    def refused():
        return [r for r in _replicas(cluster, "tiny") if sha(two) in (r.get("message") or "")]

    found, _ = wait_for(refused, timeout=120, interval=0.5)
    assert found, cluster.output() + node.output()
    message = found[0]["message"]
    assert sha(one) in message and "arrived with sha256" in message
    assert not _ready_on(cluster, "tiny")
    # Refused and deleted: no copy of the wrong file is kept on the node.
    assert not [p for p in (node.dir / "cache").rglob("tiny.gguf") if p.is_file()]


def test_an_untrusted_publisher_is_refused_until_an_administrator_vouches_which_the_audit_keeps(cluster, hub, tiny):
    hub.repo("someone/Tiny-GGUF", files={"tiny.gguf": tiny[0]})
    _pinned(cluster, hub)
    source = "hf:someone/Tiny-GGUF/tiny.gguf"
    refused = cluster.ctl("ctl", "model", "serve", source, "--engine", "llamacpp", "--cores", "1")
    assert refused.returncode == 1
    assert "someone is not among the publishers this cluster trusts" in refused.stderr
    assert "--trust" in refused.stderr

    vouched = cluster.ctl("ctl", "model", "serve", source, "--engine", "llamacpp", "--cores", "1", "--trust", "--json")
    assert vouched.returncode == 0, vouched.stderr
    origin = json.loads(vouched.stdout)["model"]["spec"]["origin"]
    assert (origin["publisher"], origin["trusted"]) == ("someone", "administrator")
    (entry,) = cluster.ctl_json("ctl", "audit", "--target", "model:tiny")
    # Who vouched is who the audit log says made the change.
    assert origin["trusted_by"] == entry["actor"] == entry["after"]["origin"]["trusted_by"]


def test_a_hub_the_control_plane_cannot_reach_refuses_the_model_saying_where(cluster):
    closed = f"http://127.0.0.1:{free_port()}"
    assert cluster.ctl("ctl", "config", "set", "hub.endpoint", closed).returncode == 0
    refused = _serve(cluster)
    assert refused.returncode == 1
    assert f"could not reach Hugging Face at {closed}" in refused.stderr
    assert "set hub.endpoint" in refused.stderr
    assert cluster.ctl_json("ctl", "models") == []


def test_ctl_model_plan_judges_a_model_on_the_hub_by_the_nodes_as_they_are_before_fetching_it(cluster, hub, tiny):
    hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": tiny[0]})
    _pinned(cluster, hub)
    cluster.agent("node-a", weights={"hf_endpoint": hub.url})
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    said = cluster.ctl("ctl", "model", "plan", SOURCE, "--context", "512")
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    assert lines[0].startswith(f"Qwen/Tiny-GGUF at {hub.repos['Qwen/Tiny-GGUF'].main[:12]}: tiny.gguf;")
    assert "planned for 512 tokens of context" in lines[0]
    assert lines[1].startswith("judged by 1 node(s) with 0 card(s)")
    (cpu,) = [line for line in lines if " cpu " in f" {line} "]
    assert "llamacpp" in cpu and "node-a" in cpu
    assert "pipeline on node-a: one node: a pipeline runs across several" in said.stdout
    # Nothing was fetched: the header alone was read.
    assert hub.bytes_served() < len(tiny[0]) + 1
    assert cluster.ctl_json("ctl", "models") == []

    served = cluster.ctl("ctl", "model", "serve", SOURCE, "--layout", "1", "--context", "512")
    assert served.returncode == 0, served.stderr
    assert "the plan's way 1: cpu on the CPU, llamacpp, at 512 tokens of context" in served.stdout
    ready, _ = wait_for(lambda: _ready_on(cluster, "tiny"), timeout=120, interval=0.5)
    assert ready, cluster.output()


def test_ctl_model_search_lists_what_runs_here_and_counts_what_does_not(cluster, hub, tiny):
    hub.repo("Qwen/Tiny-GGUF", files={"tiny-Q4_K_M.gguf": tiny[0]})
    hub.repo("someone/Tiny-Pickled", files={"pytorch_model.bin": b"\0" * 64})
    _pinned(cluster, hub)
    cluster.agent("node-a")
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    said = cluster.ctl("ctl", "model", "search", "tiny")
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    assert lines[0].startswith("judged by 1 node(s) with 0 card(s) as they are now, at 4096 tokens of context")
    (row,) = [line for line in lines if line.startswith("Qwen/Tiny-GGUF ")]
    assert "yes" in row and "safe" in row and "Q4_K_M" in row and "cpu on node-a" in row
    assert "left out: 1 pickle only (--all lists them)" in said.stdout
    every = cluster.ctl("ctl", "model", "search", "tiny", "--all")
    assert "someone/Tiny-Pickled" in every.stdout and "no: pickle only" in every.stdout


def test_a_model_from_the_hub_has_its_tokenizer_kept_on_the_control_plane_for_routing(cluster, hub, tmp_path):
    write_tiny_llama(tmp_path / "tiny")
    repo = hub.repo("Qwen/Tiny-Llama", files={name: (tmp_path / "tiny" / name).read_bytes() for name in (
        "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")})
    _pinned(cluster, hub)
    added = cluster.ctl("ctl", "model", "serve", "hf:Qwen/Tiny-Llama", "--engine", "vllm", "--context", "512",
                        "--cores", "1", "--memory", "4GB")
    assert added.returncode == 0, added.stdout + added.stderr

    kept = cluster.data_dir / "tokenizers" / "Qwen/Tiny-Llama" / repo.main
    wait_for(lambda: (kept / "tokenizer.json").exists(), timeout=30, interval=0.5)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (kept / name).read_bytes() == (tmp_path / "tiny" / name).read_bytes()
