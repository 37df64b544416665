"""`llmgw node add` on a control plane and `llmgw join` on a node, as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import stat
import time

import aiohttp
import pytest
import yaml

from llmgw import __version__
from llmgw.trust import client_ssl_context, pki
from tests.support.servers import llmgw


def node_add(server, *flags: str) -> dict:
    return server.ctl_json("node", "add", *flags)


def join(code: str, node_dir, *flags: str):
    return llmgw("join", code, "--data-dir", str(node_dir / "data"), "--config", str(node_dir / "agent.yaml"),
                 *flags)


async def agent_port_get(server, path: str, ctx: ssl.SSLContext) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://127.0.0.1:{server.ports['agent']}{path}", ssl=ctx) as r:
            return r.status, await r.json(content_type=None)


def test_node_add_prints_the_join_line_to_run_on_the_node(shared_server):
    done = shared_server.ctl("node", "add", "--name", "gpu-1")
    assert done.returncode == 0, done.stderr
    line = next(out.strip() for out in done.stdout.splitlines() if out.strip().startswith("llmgw join "))
    assert len(line.split()) == 3
    assert "lets in one node" in done.stdout and f"127.0.0.1:{shared_server.ports['agent']}" in done.stdout


def test_node_add_with_labels_prints_them_on_the_join_line_and_a_bad_one_is_refused(shared_server):
    done = shared_server.ctl("node", "add", "--label", "llmgw.role=judge", "--label", "rack=r1")
    assert done.returncode == 0, done.stderr
    line = next(out.strip() for out in done.stdout.splitlines() if out.strip().startswith("llmgw join "))
    assert line.split()[3:] == ["--label", "llmgw.role=judge", "--label", "rack=r1"]

    bad = shared_server.ctl("node", "add", "--label", "rack")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == ("llmgw: --label 'rack': write KEY=VALUE, letters, digits and . _ - (and / in the key), "
                          "each starting and ending with a letter or digit, e.g. --label llmgw.role=judge\n")


def test_a_joined_node_opens_mutual_tls_to_the_agent_port_and_is_known_by_its_id(server, tmp_path):
    made = node_add(server, "--name", "gpu-1")
    done = join(made["code"], tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    joined = json.loads(done.stdout)
    assert joined["name"] == "gpu-1" and joined["node_id"].startswith("node_")
    data = tmp_path / "data"
    assert stat.S_IMODE(os.stat(data / "node.key").st_mode) == 0o600
    config = yaml.safe_load((tmp_path / "agent.yaml").read_text())
    assert config["control_planes"] == [f"127.0.0.1:{server.ports['agent']}"]
    assert config["data_dir"] == str(data) and config["name"] == "gpu-1"

    status, who = asyncio.run(agent_port_get(server, "/whoami", client_ssl_context(str(data))))
    assert status == 200
    assert who == {"kind": "node", "id": joined["node_id"], "control_plane": "cp1", "version": __version__}


def test_a_node_joined_with_a_label_has_it_in_agent_yaml_beside_those_written_there_by_hand(server, tmp_path):
    (tmp_path / "agent.yaml").write_text("labels:\n  rack: r1\n  zone: a\n")
    done = join(node_add(server)["code"], tmp_path, "--label", "llmgw.role=judge", "--label", "zone=b")
    assert done.returncode == 0, done.stderr
    assert "labels llmgw.role=judge, zone=b" in done.stdout
    config = yaml.safe_load((tmp_path / "agent.yaml").read_text())
    assert config["labels"] == {"rack": "r1", "zone": "b", "llmgw.role": "judge"}


def test_the_same_code_joins_one_node_and_is_refused_to_the_next(server, tmp_path):
    code = node_add(server)["code"]
    assert join(code, tmp_path / "a").returncode == 0
    again = join(code, tmp_path / "b")
    assert again.returncode == 1
    assert again.stderr.startswith("llmgw: this join code was already used, at ")
    assert "make a new one with llmgw node add" in again.stderr
    assert not (tmp_path / "b" / "data" / "node.key").exists()


def test_an_expired_code_is_refused(shared_server, tmp_path):
    code = node_add(shared_server, "--ttl", "1s")["code"]
    time.sleep(1.5)  # the behaviour under test: the code's second running out
    done = join(code, tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("llmgw: this join code ran out at ")


def test_a_code_longer_than_a_week_is_refused_by_node_add(shared_server):
    done = shared_server.ctl("node", "add", "--ttl", "8d")
    assert done.returncode == 1
    assert "a join code lives from 1s to 7 days" in done.stderr


def test_without_a_cluster_certificate_nothing_but_joining_talks_on_the_agent_port(shared_server, tmp_path):
    blind = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    status, body = asyncio.run(agent_port_get(shared_server, "/whoami", blind))
    assert status == 403 and body["error"]["code"] == "certificate_required"

    other_ca, other_key = pki.make_ca("elsewhere")
    key = pki.new_key()
    cert = pki.sign_node(other_ca, other_key, pki.make_csr(key, "x"), "node_x")
    (tmp_path / "x.crt").write_text(pki.cert_pem(cert))
    (tmp_path / "x.key").write_bytes(pki.key_pem(key))
    blind.load_cert_chain(tmp_path / "x.crt", tmp_path / "x.key")
    with pytest.raises((aiohttp.ClientConnectionError, ssl.SSLError)):
        asyncio.run(agent_port_get(shared_server, "/whoami", blind))


def test_ctl_status_says_the_agent_port_takes_agents_and_which_ca(shared_server):
    status = shared_server.ctl_json("ctl", "status")
    assert status["agents"]["taking"] and status["agents"]["problem"] is None
    assert status["agents"]["address"] == f"127.0.0.1:{shared_server.ports['agent']}"
    assert len(status["agents"]["ca_fingerprint"]) == 64
    assert stat.S_IMODE(os.stat(shared_server.data_dir / "master-key").st_mode) == 0o600


def test_a_second_control_plane_without_the_master_key_takes_no_agents_and_says_why(servers, postgres_cluster,
                                                                                   tmp_path):
    url = postgres_cluster.create_database()
    a, b = servers("cp-a", store=url), servers("cp-b", store=url)
    assert a.init().returncode == 0
    a.start()
    b.start()
    status = b.ctl_json("ctl", "status")
    assert not status["agents"]["taking"]
    assert "copy the master-key file" in status["agents"]["problem"]
    assert "master key" in b.output()
    # Its code still names both, and a node joins through the one that can sign.
    code = node_add(b)["code"]
    done = join(code, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["control_plane"] == f"127.0.0.1:{a.ports['agent']}"
