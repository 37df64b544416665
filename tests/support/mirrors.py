"""Model mirrors for tests: the cluster's certificates made with llmgw's own pki, a mirror in the test's process
(`running_mirror`), and one as a process of its own (`MirrorProcess`, `llmgw mirror serve`).

    certs = Certs(tmp_path / "certs")
    cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)
    async with running_mirror(cfg) as (mirror, base):
        client = MirrorClient(base, certs.control_plane_ssl("cp1"))
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import yaml
from aiohttp import web

from llmgw.config.loader import from_dict
from llmgw.config.mirror import MirrorConfig
from llmgw.mirror import tls
from llmgw.mirror.api import make_app
from llmgw.mirror.service import Mirror
from llmgw.trust import pki
from llmgw.trust.tls import client_ssl_context
from tests.support.processes import end, first_line

ROOT = Path(__file__).resolve().parents[2]


class Certs:
    """A cluster CA, and certificates from it as control planes, nodes and mirrors get them, in files where llmgw
    looks."""

    def __init__(self, folder: Path, cluster: str = "test"):
        self.folder = folder
        self.ca_cert, self.ca_key = pki.make_ca(cluster)
        self.ca_pem = pki.cert_pem(self.ca_cert)

    def control_plane(self, name: str) -> Path:
        """A control plane's data directory holding tls/agent-port.{crt,key} and tls/ca.crt, for 127.0.0.1."""
        data_dir = self.folder / name
        (data_dir / "tls").mkdir(parents=True, exist_ok=True)
        key = pki.new_key()
        cert = pki.sign_server(self.ca_cert, self.ca_key, key.public_key(), name, ["127.0.0.1", "localhost"])
        (data_dir / "tls" / "agent-port.key").write_bytes(pki.key_pem(key))
        os.chmod(data_dir / "tls" / "agent-port.key", 0o600)
        (data_dir / "tls" / "agent-port.crt").write_text(pki.cert_pem(cert))
        (data_dir / "tls" / "ca.crt").write_text(self.ca_pem)
        return data_dir

    def control_plane_ssl(self, name: str) -> ssl.SSLContext:
        data_dir = self.folder / name
        if not (data_dir / "tls").exists():
            self.control_plane(name)
        return tls.client_context(MirrorConfig(data_dir=str(data_dir)))

    def mirror(self, name: str) -> dict[str, str]:
        """A model mirror's own certificate, as `llmgw mirror add-peer` gets one (for 127.0.0.1): mirror.yaml's tls."""
        folder = self.folder / f"mirror-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        key = pki.new_key()
        cert = pki.sign_mirror(self.ca_cert, self.ca_key, pki.make_csr(key, name), name, ["127.0.0.1", "localhost"])
        (folder / "mirror.key").write_bytes(pki.key_pem(key))
        os.chmod(folder / "mirror.key", 0o600)
        (folder / "mirror.crt").write_text(pki.cert_pem(cert))
        (folder / "ca.crt").write_text(self.ca_pem)
        return {"cert_file": str(folder / "mirror.crt"), "key_file": str(folder / "mirror.key"),
                "ca_file": str(folder / "ca.crt")}

    def mirror_ssl(self, name: str) -> ssl.SSLContext:
        files = self.mirror(name) if not (self.folder / f"mirror-{name}").exists() else {
            "cert_file": str(self.folder / f"mirror-{name}" / "mirror.crt"),
            "key_file": str(self.folder / f"mirror-{name}" / "mirror.key"),
            "ca_file": str(self.folder / f"mirror-{name}" / "ca.crt")}
        return tls.client_context(from_dict(MirrorConfig, {"tls": files}))

    def node(self, node_id: str) -> Path:
        """A joined node's agent data directory: ca.crt, node.crt, node.key."""
        data_dir = self.folder / f"node-{node_id}"
        data_dir.mkdir(parents=True, exist_ok=True)
        key = pki.new_key()
        cert = pki.sign_node(self.ca_cert, self.ca_key, pki.make_csr(key, node_id), node_id)
        (data_dir / "node.key").write_bytes(pki.key_pem(key))
        (data_dir / "node.crt").write_text(pki.cert_pem(cert))
        (data_dir / "ca.crt").write_text(self.ca_pem)
        return data_dir

    def node_ssl(self, node_id: str) -> ssl.SSLContext:
        return client_ssl_context(str(self.node(node_id)))


def mirror_config(folder: Path, data_dir: Path, hub_url: str, peers: list[str] | None = None, port: int = 0,
                  **more: object) -> MirrorConfig:
    return from_dict(MirrorConfig, {"listen": f"127.0.0.1:{port}", "dir": str(folder), "data_dir": str(data_dir),
                                    "hub_endpoint": hub_url, "peers": peers or [], **more})


@contextlib.asynccontextmanager
async def running_mirror(cfg: MirrorConfig) -> AsyncIterator[tuple[Mirror, str]]:
    """The mirror's own app, served over its TLS on loopback in this process; (the mirror, its https:// base)."""
    mirror = Mirror(cfg, tls.client_context(cfg))
    runner = web.AppRunner(make_app(mirror), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", cfg.listen.port, ssl_context=tls.server_context(cfg))
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield mirror, f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class MirrorProcess:
    """`llmgw mirror serve --config FILE` as a process of its own; `url` once it says it listens."""

    def __init__(self, cfg: MirrorConfig, config_file: Path, env: dict[str, str] | None = None):
        config_file.write_text(yaml.safe_dump({"listen": str(cfg.listen), "dir": cfg.dir, "data_dir": cfg.data_dir,
                                               "hub_endpoint": cfg.hub_endpoint, "peers": list(cfg.peers),
                                               "peer_interval": cfg.peer_interval}))
        self.config_file = config_file
        self.proc = subprocess.Popen([sys.executable, "-m", "llmgw", "mirror", "serve", "--config", str(config_file)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        line = first_line(self.proc.stdout.fileno(), 60).decode()
        if "listening on " not in line:
            _, err = end(self.proc)
            raise RuntimeError(f"llmgw mirror serve did not start: {line!r} {err.decode()[-2000:]}")
        self.url = line.split("listening on ", 1)[1].split(",", 1)[0].strip()

    @staticmethod
    def command(cfg: MirrorConfig, config_file: Path, *args: str) -> subprocess.Popen[str]:
        """`llmgw mirror ARGS --config FILE` (add, list, remove, import), talking to the mirror at cfg.listen."""
        return subprocess.Popen([sys.executable, "-m", "llmgw", "mirror", args[0], "--config", str(config_file),
                                 *args[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    def stop(self) -> str:
        """SIGTERM, and what it wrote to stderr."""
        _, err = end(self.proc)
        return err.decode(errors="replace") if err else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
