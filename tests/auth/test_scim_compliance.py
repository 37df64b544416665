"""scim2-tester, the outside SCIM 2.0 checker, passes every check for what ServiceProviderConfig claims."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx2
from aiohttp.test_utils import TestServer
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server

from llmgw.auth.scim import make_token
from llmgw.config.auth import SCIMSettings
from tests.auth.scimkit import Plane, scim_app


def _check(url: str, token: str) -> list:
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        return check_server(SyncSCIMClient(http))


async def test_scim2_tester_finds_no_failed_check(store, tmp_path):
    plane = Plane(store, SCIMSettings(enabled=True), str(tmp_path))
    token = await make_token(store)
    async with TestServer(scim_app(plane), host="127.0.0.1") as server:
        # The checker's client is synchronous: it runs on a thread while the loop serves it.
        results = await asyncio.to_thread(_check, str(server.make_url("/scim/v2")), token)

    counts = Counter(r.status.name for r in results)
    print(f"scim2-tester: {dict(counts)}")
    for r in results:
        if r.status == Status.SKIPPED:
            print(f"  skipped {r.title}: {r.reason}")
    failed = [f"{r.title}: {r.reason}" for r in results if r.status in (Status.ERROR, Status.CRITICAL)]
    assert not failed, "\n".join(failed)
    assert counts["SUCCESS"] >= 40
