"""SCIM on a real `llmgw server`'s client port: turned on by the setting, beside /v1 and the portal."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import aiohttp

from llmgw.auth.scim import make_token
from llmgw.store import open_store
from tests.support.servers import Server, write_config
from tests.support.waiting import wait_until

ADA = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "ada@corp.example",
       "name": {"formatted": "Ada Lovelace"}, "emails": [{"value": "ada@corp.example", "primary": True}],
       "active": True}


async def test_on_a_real_server_scim_answers_once_turned_on_and_v1_still_wants_a_key(tmp_path):
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    try:
        status, body = server.get("/scim/v2/ServiceProviderConfig")
        assert status == 404 and body["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]

        store = await open_store(server.store)
        try:
            token = await make_token(store)
        finally:
            await store.close()
        changed = server.ctl("ctl", "config", "set", "auth.scim.enabled", "true")
        assert changed.returncode == 0, changed.stderr
        headers = {"Authorization": f"Bearer {token}"}
        wait_until(lambda: server.get("/scim/v2/ServiceProviderConfig", headers)[0] == 200, 15,
                   "the control plane read auth.scim.enabled")

        status, body = server.get("/scim/v2/Users")
        assert status == 401 and body["status"] == "401"  # SCIM's shape, not the API key's
        async with aiohttp.ClientSession(server.client_url, headers=headers) as http:
            async with http.post("/scim/v2/Users", data=json.dumps(ADA),
                                 headers={"Content-Type": "application/scim+json"}) as r:
                assert r.status == 201, await r.text()
                made = await r.json()
            async with http.patch(f"/scim/v2/Users/{made['id']}", json={
                    "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
                    "Operations": [{"op": "Replace", "path": "active", "value": "False"}]}) as r:
                assert r.status == 200 and (await r.json())["active"] is False
            async with http.get("/v1/models") as r:
                assert r.status == 401  # the SCIM token is no API key
        people = server.ctl_json("people", "list")
        listed = people if isinstance(people, list) else people.get("people", people.get("data", []))
        ada = next(p for p in listed if p["email"] == "ada@corp.example")
        assert (ada["name"], ada["state"], ada["suspended_by"]) == ("Ada Lovelace", "suspended", "scim")
    finally:
        server.stop()


async def test_with_two_workers_scim_is_answered_by_the_worker_processes(tmp_path):
    server = Server(tmp_path, "gw", config=write_config(tmp_path / "gw.yaml", {"workers": 2}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    try:
        store = await open_store(server.store)
        try:
            token = await make_token(store)
        finally:
            await store.close()
        assert server.ctl("ctl", "config", "set", "auth.scim.enabled", "true").returncode == 0
        headers = {"Authorization": f"Bearer {token}"}
        # Each worker reads the settings on its own poll: wait until both answer, not just the first.
        enabled: set[str] = set()

        def both_enabled() -> bool:
            request = urllib.request.Request(server.client_url + "/scim/v2/ServiceProviderConfig", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=5) as r:
                    enabled.add(r.headers.get("x-llmgw-worker", ""))
            except urllib.error.HTTPError:
                pass
            return len(enabled - {""}) == 2

        wait_until(both_enabled, 15, "both workers read auth.scim.enabled")
        async with aiohttp.ClientSession(server.client_url, headers=headers) as http:
            async with http.post("/scim/v2/Users", json=ADA) as r:
                assert r.status == 201, await r.text()
                made = await r.json()
            workers = set()
            for _ in range(20):  # new connections land on either worker
                async with aiohttp.ClientSession(server.client_url, headers=headers) as fresh:
                    async with fresh.get(f"/scim/v2/Users/{made['id']}") as r:
                        assert r.status == 200 and (await r.json())["userName"] == "ada@corp.example"
                        workers.add(r.headers.get("x-llmgw-worker"))
        assert workers - {None}, "no answer came from a worker process"
    finally:
        server.stop()
