"""The shipped nginx and Caddy configurations, with Debian's servers, in front of two real control planes.

packaging/proxies/ is used as shipped, but for the addresses: the control planes' client ports for the
example's, a loopback port for the site, no TLS. Both control planes share one PostgreSQL store and a
streaming sim-engine; cp-a leads. The client connects from 127.0.0.2, so the address a usage row records is
the one the proxy forwarded, not the proxy's own (127.0.0.1, listed in router.trusted_proxies).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.pgcluster import free_port
from tests.support.servers import Server, SimEngine, usage_rows, write_config
from tests.support.waiting import wait_for

# The module's tests are one story on one pair of control planes: streams and addresses first, then the
# leader is killed and the proxies must find the new one.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.in_order]

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "packaging" / "proxies"
CLIENT = "127.0.0.2"
TOKENS, RATE = 20, 10  # a streamed answer of up to 2 s (the sim's own answer is 16 tokens)


class Proxy:
    def __init__(self, name: str, argv: list[str], port: int, root: Path, env: dict[str, str] | None = None):
        self.name, self.port = name, port
        self.log = open(root / f"{name}.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        up, _ = wait_for(lambda: self._answers(), timeout=30, interval=0.1)
        assert up, (root / f"{name}.log").read_text()

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}")
        try:
            status, _ = get(self.port, "/health")
        except OSError:
            return False
        return status == 200

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def nginx(root: Path, upstreams: list[str]) -> Proxy:
    port = free_port()
    site = (SHIPPED / "nginx-llmgw.conf").read_text()
    site = site.replace("server 10.0.0.157:8080", f"server {upstreams[0]}").replace(
        "server 10.0.0.158:8080", f"server {upstreams[1]}")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port};")
    site = re.sub(r"\n\s*ssl_certificate(_key)? [^\n]+;", "", site)
    prefix = root / "nginx"
    for folder in ("logs", "temp"):
        (prefix / folder).mkdir(parents=True, exist_ok=True)
    (prefix / "llmgw.conf").write_text(site)
    # What /etc/nginx/nginx.conf would hold, for a server of the test's own: its files under its folder.
    (prefix / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "") +
        f"daemon off;\npid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log;\nworker_processes 1;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n  access_log {prefix}/logs/access.log;\n  client_body_temp_path {prefix}/temp/body;\n"
        f"  proxy_temp_path {prefix}/temp/proxy;\n  fastcgi_temp_path {prefix}/temp/fastcgi;\n"
        f"  uwsgi_temp_path {prefix}/temp/uwsgi;\n  scgi_temp_path {prefix}/temp/scgi;\n"
        f"  include {prefix}/llmgw.conf;\n}}\n")
    checked = subprocess.run([_program("nginx"), "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    return Proxy("nginx", [_program("nginx"), "-p", str(prefix), "-c", str(prefix / "nginx.conf")], port, root)


def caddy(root: Path, upstreams: list[str]) -> Proxy:
    port = free_port()
    text = (SHIPPED / "Caddyfile").read_text()
    text = text.replace("llm.example.com {", f"http://127.0.0.1:{port} {{")
    text = text.replace("reverse_proxy 10.0.0.157:8080 10.0.0.158:8080", f"reverse_proxy {' '.join(upstreams)}")
    # No admin endpoint (two test runs would both want localhost:2019), and nothing kept in the user's home.
    folder = root / "caddy"
    folder.mkdir(exist_ok=True)
    (folder / "Caddyfile").write_text("{\n\tadmin off\n}\n\n" + text)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "XDG_DATA_HOME": str(folder), "XDG_CONFIG_HOME": str(folder)}
    return Proxy("caddy", [_program("caddy"), "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"],
                 port, root, env)


def _program(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    assert found, f"{name} is Debian's (apt-get install nginx-light caddy); build.py test installs it"
    return found


def get(port: int, path: str) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(CLIENT, 0))
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body.startswith(b"{") else {}
    finally:
        connection.close()


def stream(port: int, key: str) -> tuple[int, list[float], str]:
    """A streamed chat answer: its status, when each piece of text arrived (monotonic), and the text."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(CLIENT, 0))
    body = json.dumps({"model": "sim", "stream": True, "max_tokens": TOKENS,
                       "messages": [{"role": "user", "content": "Tell me a long story."}]})
    try:
        connection.request("POST", "/v1/chat/completions", body=body,
                           headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        response = connection.getresponse()
        arrivals, text = [], ""
        while True:
            line = response.readline()
            if not line:
                break
            if line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                piece = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content")
                if piece:
                    arrivals.append(time.monotonic())
                    text += piece
        return response.status, arrivals, text
    finally:
        connection.close()


@pytest.fixture(scope="module")
def planes(tmp_path_factory, postgres_cluster):
    root = tmp_path_factory.mktemp("proxies")
    engine = SimEngine(root, "sim", "--tokens-per-second", str(RATE)).start()
    config = write_config(root / "gw.yaml", {"models": [{"name": "sim", "endpoints": [engine.url]}],
                                             "router": {"trusted_proxies": ["127.0.0.1"]}})
    url = postgres_cluster.create_database()
    a = Server(root, "cp-a", store=url, config=config)
    b = Server(root, "cp-b", store=url, config=config)
    done = a.init("--json")
    assert done.returncode == 0, done.stderr
    a.key = json.loads(done.stdout)["key"]["key"]
    a.start()
    wait_for(a.leads, timeout=30)
    shutil.copy(a.data_dir / "master-key", b.data_dir / "master-key")
    os.chmod(b.data_dir / "master-key", 0o600)
    b.start()
    upstreams = [f"127.0.0.1:{a.ports['client']}", f"127.0.0.1:{b.ports['client']}"]
    proxies = {"nginx": nginx(root, upstreams), "caddy": caddy(root, upstreams)}
    yield a, b, proxies
    for proxy in proxies.values():
        proxy.stop()
    b.stop()
    a.stop()
    engine.stop()


def _spread(arrivals: list[float]) -> float:
    return arrivals[-1] - arrivals[0] if arrivals else 0.0


@pytest.mark.parametrize("name", ["nginx", "caddy"])
def test_a_streams_tokens_arrive_through_the_proxy_as_they_are_written(planes, name):
    a, _, proxies = planes
    direct_status, direct, direct_text = stream(a.ports["client"], a.key)
    status, through, text = stream(proxies[name].port, a.key)

    assert (direct_status, status) == (200, 200)
    assert text == direct_text and len(through) == len(direct) >= 10
    # The engine writes a token every 0.1 s: a proxy that held the answer back would hand it over at once.
    assert _spread(through) > 0.5 * (len(through) - 1) / RATE, through
    gaps = sorted(b - a for a, b in zip(through, through[1:], strict=False))
    direct_gaps = sorted(b - a for a, b in zip(direct, direct[1:], strict=False))
    print(f"\n{name}: median gap between tokens {gaps[len(gaps) // 2] * 1e3:.0f} ms through it, "
          f"{direct_gaps[len(direct_gaps) // 2] * 1e3:.0f} ms direct; spread {_spread(through):.2f} s "
          f"against {_spread(direct):.2f} s")


@pytest.mark.parametrize("name", ["nginx", "caddy"])
def test_the_clients_address_reaches_the_usage_row_through_the_proxy(planes, name):
    a, _, proxies = planes
    before = len(usage_rows(a, 0))
    status, _, _ = stream(proxies[name].port, a.key)
    assert status == 200

    row = usage_rows(a, before + 1)[-1]

    detail = row["detail"] if isinstance(row["detail"], dict) else json.loads(row["detail"])
    assert detail.get("client") == CLIENT, row


def test_caddy_sends_to_the_leader_only_and_both_find_the_new_one_when_it_is_killed(planes):
    a, b, proxies = planes
    assert get(proxies["caddy"].port, "/leader") == (200, {"leader": True, "name": "cp-a"})

    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)

    def answered_by_b(port: int) -> bool:
        try:
            return get(port, "/leader")[1].get("name") == "cp-b" and stream(port, a.key)[0] == 200
        except OSError:
            return False

    for name, proxy in proxies.items():
        found, waited = wait_for(lambda port=proxy.port: answered_by_b(port), timeout=60, interval=0.5)
        assert found, f"{name} did not reach the new leader: {b.output()[-2000:]}"
        print(f"\n{name}: answered by the new leader {waited:.1f} s after the old one was killed")
