"""`llmgw mirror add-peer` against a real sshd: a second mirror installed into a root directory from llmgw.pyz,
with a certificate of its own from the cluster CA (its key made there), that copies the first mirror's file; the
first mirror and the cluster told of it; run again and nothing changes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import stat

import pytest
import yaml

from llmgw.config.loader import from_dict
from llmgw.config.mirror import MirrorConfig
from llmgw.mirror import MirrorClient, MirrorError, client_context
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import SupervisedManager
from llmgw.trust import pki
from tests.support.hfhub import Hub, gguf_bytes
from tests.support.mirrors import MirrorProcess, mirror_config
from tests.support.pgcluster import free_port
from tests.support.pyz import pyz  # noqa: F401 - a fixture
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow  # installs over SSH from llmgw.pyz

UNIT = "llmgw-mirror.service"
MODEL = gguf_bytes()


@pytest.fixture
def hub():
    with Hub().threaded() as hub:
        hub.repo("acme/tiny", files={"tiny.gguf": MODEL})
        yield hub


@pytest.fixture
def peer_root(tmp_path):
    root = tmp_path / "peer-root"
    root.mkdir()
    yield root
    layout = Layout(root)
    if layout.unit_file(UNIT).exists():
        SupervisedManager(layout).stop(UNIT)


def _files(url: str, cfg: MirrorConfig) -> dict:
    try:
        return asyncio.run(MirrorClient(url, client_context(cfg), timeout=5).files())
    except MirrorError:
        return {"files": [], "peers": {}}


def snapshot(root) -> dict[str, tuple[float, str]]:
    """Every file the install wrote (not the mirror's own list and logs), with its mtime and sha256."""
    return {p.relative_to(root).as_posix(): (p.stat().st_mtime, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()
            and not p.relative_to(root).as_posix().startswith(("var/log/", "run/", "var/cache/"))}


def test_add_peer_installs_a_mirror_that_copies_this_ones_files_and_a_rerun_changes_nothing(
        server, sshd, peer_root, pyz, hub, tmp_path):
    first_yaml = tmp_path / "m1.yaml"
    first_cfg = mirror_config(tmp_path / "m1", server.data_dir, hub.url, port=free_port())
    first = MirrorProcess(first_cfg, first_yaml)
    try:
        added = MirrorProcess.command(first_cfg, first_yaml, "add", "hf:acme/tiny/tiny.gguf")
        out, err = added.communicate(timeout=60)
        assert added.returncode == 0, out + err
        peer_port = free_port()
        command = ("mirror", "add-peer", f"root@127.0.0.1:{sshd.port}", "--key", str(sshd.client_key),
                   "--root", str(peer_root), "--program", str(pyz), "--config", str(first_yaml), "--name", "m2",
                   "--listen", f"127.0.0.1:{peer_port}", "--wait", "90", "--json")

        done = server.ctl(*command, timeout=300)
        assert done.returncode == 0, done.stderr + done.stdout + sshd.output()
        report = json.loads(done.stdout)
        states = {step["step"]: step["state"] for step in report["steps"]}
        assert states == {"log in": "done", "check the machine": "done", "copy the program": "done",
                          "make the llmgw user and directories": "done", "make the mirror's key": "done",
                          "sign the mirror's certificate": "done", "write the certificate": "done",
                          "write mirror.yaml": "done", "make the mirror's folder": "done",
                          "install the service": "done", "start the service": "done",
                          "wait for the mirror to answer": "done", "name it in this mirror's peers": "done",
                          "name it in the cluster's mirror.peers": "done"}
        peer_url = f"https://127.0.0.1:{peer_port}"
        assert report["mirror"]["url"] == peer_url and report["mirror"]["peer_of"] == first.url

        # The peer's files: its key made there (0600), its certificate a mirror's from the cluster CA.
        layout = Layout(peer_root)
        tls = layout.server_data / "tls"
        assert stat.S_IMODE((tls / "mirror.key").stat().st_mode) == 0o600
        assert stat.S_IMODE((tls / "mirror.crt").stat().st_mode) == 0o644
        cert = pki.load_cert((tls / "mirror.crt").read_bytes())
        assert pki.cert_identity(cert) == ("mirror", "m2")
        assert (tls / "ca.crt").read_text() == (server.data_dir / "tls" / "ca.crt").read_text()
        written = yaml.safe_load(layout.mirror_config.read_text())
        assert written["peers"] == [first.url] and written["tls"]["key_file"] == str(tls / "mirror.key")
        assert "PRIVATE KEY" not in done.stdout + done.stderr

        # It copied the first mirror's file, checked; the first reads it back; the cluster knows it.
        peer_cfg = from_dict(MirrorConfig, {"data_dir": str(server.data_dir)})
        held, listing = wait_for(lambda: [f for f in _files(peer_url, peer_cfg)["files"] if f["state"] == "held"],
                                 timeout=60, interval=0.3)
        assert held, listing
        [row] = held
        assert row["path"] == "tiny.gguf" and row["sha256"] == hashlib.sha256(MODEL).hexdigest()
        assert row["origin"] == first.url
        assert yaml.safe_load(first_yaml.read_text())["peers"] == [peer_url]
        assert wait_for(lambda: (_files(first.url, first_cfg)["peers"].get(peer_url) or {}).get("ok"),
                        timeout=30, interval=0.3)[0]
        settings = server.ctl_json("ctl", "config", "get", "mirror")
        assert settings["value"]["peers"] == [peer_url]
        audit = server.ctl_json("ctl", "audit", "--target", "mirror:m2")
        assert [entry["action"] for entry in audit] == ["mirror.certificate"]

        before = snapshot(peer_root)
        pid = SupervisedManager(layout).status(UNIT).pid
        again = server.ctl(*command, timeout=300)
        assert again.returncode == 0, again.stderr
        steps = json.loads(again.stdout)["steps"]
        changing = {s["step"]: s["state"] for s in steps if s["step"] not in ("log in", "check the machine")}
        assert changing.pop("wait for the mirror to answer") == "done"  # a wait, which changes nothing
        assert set(changing.values()) == {"unchanged"}, steps
        assert snapshot(peer_root) == before
        assert SupervisedManager(layout).status(UNIT).pid == pid
        assert len(server.ctl_json("ctl", "audit", "--target", "mirror:m2")) == 1
    finally:
        first.stop()
