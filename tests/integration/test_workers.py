"""`workers: 2`: the client API served by two worker processes, with real sim-engines and the SDK."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil
import pytest

from tests.support.servers import Server, llmgw, write_config
from tests.support.waiting import wait_for

CHAT = [{"role": "user", "content": "Say something."}]
BODY = json.dumps({"model": "qwen", "messages": CHAT, "max_tokens": 1}).encode()


@pytest.fixture
def gateway(servers, tmp_path, engines):
    """gateway(workers=2) -> a running server in front of one sim-engine, its first key `.key`."""

    def make(workers: int = 2, name: str = "gw") -> Server:
        engine = engines("qwen")
        config = write_config(tmp_path / f"{name}.yaml", {
            "models": [{"name": "qwen", "endpoints": [engine.url]}], "workers": workers})
        server = servers(name, config=config)
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        (server.data_dir / "init.json").write_text(done.stdout)  # the first admin's password, for portal tests
        server.key = json.loads(done.stdout)["key"]["key"]
        server.start()
        server.openai = openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)
        return server

    return make


def ask(server: Server, key: str | None = None, timeout: float = 30) -> tuple[int, str | None]:
    """One chat request on a connection of its own: (status, the worker that answered)."""
    request = urllib.request.Request(server.client_url + "/v1/chat/completions", data=BODY, method="POST",
                                     headers={"Authorization": f"Bearer {key or server.key}",
                                              "Content-Type": "application/json", "Connection": "close"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            r.read()
            return r.status, r.headers.get("x-llmgw-worker")
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, e.headers.get("x-llmgw-worker")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def worker_pids(server: Server) -> set[int]:
    children = psutil.Process(server.proc.pid).children()
    return {c.pid for c in children if "--worker-of" in c.cmdline()}


def metrics(server: Server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=5) as r:
        return r.read().decode()


def test_requests_over_many_connections_are_answered_and_spread_over_both_workers(gateway):
    gw = gateway(workers=2)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: ask(gw), range(200)))
    assert {status for status, _ in answers} == {200}
    answered_by = {int(worker) for _, worker in answers}
    assert answered_by == worker_pids(gw) and len(answered_by) == 2
    # The SDK, health and leadership answer on the workers too.
    assert gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=2).choices
    assert gw.get("/health")[0] == 200
    assert gw.get("/leader") == (200, {"leader": True, "name": "gw"})
    # The main process's /metrics shows what the workers counted (a second late at most).
    line = 'llmgw_requests_total{api="chat",model="qwen",status="200"} 201.0'
    seen, _ = wait_for(lambda: line in metrics(gw), timeout=5, interval=0.2)
    assert seen, metrics(gw)
    assert "llmgw_workers_running 2.0" in metrics(gw)
    from prometheus_client.parser import text_string_to_metric_families

    listed = list(text_string_to_metric_families(metrics(gw)))
    # Each family once: Prometheus refuses a whole scrape that repeats one (the main process
    # once built a client app of its own, and listed its connection counter beside the workers').
    assert sorted(f.name for f in listed) == sorted({f.name for f in listed})
    families = {f.name: f for f in listed}
    ttft = families["llmgw_time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    assert count == 201


def test_one_process_names_no_worker(gateway):
    gw = gateway(workers=1)
    assert ask(gw) == (200, None)
    assert worker_pids(gw) == set()


def test_a_key_with_an_rpm_of_20_is_held_to_it_across_both_workers(gateway):
    gw = gateway(workers=2)
    made = gw.ctl_json("keys", "create", "limited", "--project", "Demo/dev/app", "--create")
    gw.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", "20")
    answers = []
    for _ in range(60):
        # 20 a second, each on a new connection, so the kernel deals them to both workers.
        answers.append(ask(gw, made["key"]))
        time.sleep(0.05)
    passed = [worker for status, worker in answers if status == 200]
    refused = [status for status, _ in answers if status != 200]
    assert len(set(passed)) == 2  # both workers let some through
    # Each worker admits only what the main process lent it from the key's
    # minute: 20 in all, not 20 each (tests/integration/test_rate_limits.py
    # sends 200 at once).
    assert len(passed) == 20, len(passed)
    assert set(refused) == {429}


def test_a_revoked_key_is_refused_by_every_worker_at_once(gateway):
    gw = gateway(workers=2)
    made = gw.ctl_json("keys", "create", "doomed", "--project", "Demo/dev/app", "--create")
    before = [ask(gw, made["key"]) for _ in range(20)]
    assert {s for s, _ in before} == {200} and len({w for _, w in before}) == 2  # cached on both
    gw.ctl_json("keys", "revoke", made["id"])
    after = [ask(gw, made["key"]) for _ in range(20)]
    assert {s for s, _ in after} == {401} and len({w for _, w in after}) == 2


def test_a_killed_worker_is_replaced_and_requests_keep_being_answered(gateway):
    gw = gateway(workers=2)
    first = worker_pids(gw)
    victim = min(first)
    psutil.Process(victim).kill()
    # Every worker accepts from the one socket the main process holds: from the victim's end on,
    # no connection can be given to it, and none is refused or reset while it is replaced.
    wait_for(lambda: not _running(victim), timeout=10, interval=0.01)
    answers = [ask(gw) for _ in range(40)]
    assert {s for s, _ in answers} == {200}
    assert str(victim) not in {w for _, w in answers}
    replaced, _ = wait_for(lambda: len(worker_pids(gw)) == 2 and victim not in worker_pids(gw), timeout=20)
    assert replaced
    newcomer = (worker_pids(gw) - first).pop()
    # Until it serves, the survivor accepts on its socket too; from then on it has its own share.
    serves, _ = wait_for(lambda: f"(pid {newcomer}) serves the client API" in gw.output(), timeout=30)
    assert serves
    later = {w for _, w in (ask(gw) for _ in range(40))}
    assert str(newcomer) in later and str(victim) not in later
    assert f"(pid {victim}) was killed by SIGKILL; starting another" in gw.output()
    restarts, _ = wait_for(lambda: "llmgw_worker_restarts_total 1.0" in metrics(gw), timeout=5)
    assert restarts


def test_sigterm_with_workers_writes_every_usage_row(gateway):
    import aiohttp

    gw = gateway(workers=2)
    n = 3000

    async def load():
        headers = {"Authorization": f"Bearer {gw.key}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
            sem = asyncio.Semaphore(32)
            seen: set[str] = set()

            async def one():
                async with sem:
                    async with session.post(gw.client_url + "/v1/chat/completions", data=BODY,
                                            headers=headers) as r:
                        assert r.status == 200
                        seen.add(r.headers["x-llmgw-worker"])
                        await r.read()

            await asyncio.gather(*(one() for _ in range(n)))
            return seen

    assert len(asyncio.run(load())) == 2
    workers = worker_pids(gw)
    gw.signal(signal.SIGTERM)
    assert gw.proc.wait(timeout=60) == 0
    assert not any(psutil.pid_exists(pid) for pid in workers)
    gw.start()
    summary = gw.ctl_json("ctl", "usage", "--by", "model")
    row = next(r for r in summary["rows"] if r["group"] == "qwen")
    assert row["requests"] == n
    assert row["completion_tokens"] == n


def test_a_second_server_on_the_same_ports_with_workers_exits_with_one_sentence(gateway, tmp_path):
    gw = gateway(workers=2)
    for workers in (2, 1):
        config = write_config(tmp_path / f"twin{workers}.yaml", {"workers": workers})
        twin = Server(tmp_path, f"twin{workers}", config=config)
        twin.ports = dict(gw.ports)
        done = llmgw("server", *twin.args(), timeout=30)
        assert done.returncode == 1
        assert done.stderr.strip().count("\n") == 0
        assert "port" in done.stderr and "taken by another process" in done.stderr
    assert gw.leads()
    assert ask(gw)[0] == 200


def test_workers_out_of_range_are_refused_naming_the_key(servers, tmp_path):
    s = servers("cp1")
    done = llmgw("server", *s.args(), "--workers", "0", timeout=30)
    assert done.returncode == 1
    assert "workers: must be from 1 to 64, got 0" in done.stderr


async def _revoke_on_the_portal(gw: Server, email: str, password: str, key_id: str) -> int:
    """Sign in and revoke one's own key as a browser would; the status of the revoke's answer."""
    import re

    import aiohttp

    async with aiohttp.ClientSession(gw.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get("/signin") as page:
            csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
        async with http.post("/signin", data={"_csrf": csrf, "email": email, "password": password},
                             allow_redirects=False) as signed:
            assert signed.status == 303, await signed.text()
        async with http.get("/keys") as keys:
            csrf = re.search(r'name="_csrf" value="([^"]+)"', await keys.text()).group(1)
        async with http.post(f"/keys/{key_id}/revoke", data={"_csrf": csrf}, allow_redirects=False) as revoked:
            return revoked.status


def test_a_key_revoked_on_the_portal_in_one_worker_is_refused_by_every_worker(gateway):
    gw = gateway(workers=2)
    # An hour's cache: only the worker -> main -> workers message can make the other worker forget the key.
    gw.ctl_json("ctl", "config", "set", "auth.cache_ttl", "1h")
    admin = json.loads((gw.data_dir / "init.json").read_text())["administrator"]
    made = gw.ctl_json("keys", "create", "doomed", "--project", "Default/default/default",
                       "--person", admin["email"])
    before = [ask(gw, made["key"]) for _ in range(20)]
    assert {s for s, _ in before} == {200} and len({w for _, w in before}) == 2  # cached on both

    assert asyncio.run(_revoke_on_the_portal(gw, admin["email"], admin["password"], made["id"])) == 303

    # The worker that served the page forgot it at once; the other within the message's trip through main.
    wait_for(lambda: {s for s, _ in (ask(gw, made["key"]) for _ in range(10))} == {401}, timeout=10, interval=0.1)
    after = [ask(gw, made["key"]) for _ in range(20)]
    assert {s for s, _ in after} == {401} and len({w for _, w in after}) == 2
