"""The catalog's ready replicas as a control plane's routers get them, and the counts a standby exchanges."""

from __future__ import annotations

import asyncio

from aiohttp import web

from llmgw.control.catalog import Entry
from llmgw.control.exchange import summed
from llmgw.control.routes import Routes, from_doc, placed_models, probed, to_doc
from llmgw.store import CatalogModel, Replica

SIM = [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]


def _entries() -> list[Entry]:
    return [Entry.from_record(CatalogModel("chat", {"name": "chat", "aliases": ["talk"], "profiles": SIM,
                                                    "context_length": 4096})),
            Entry.from_record(CatalogModel("idle", {"name": "idle", "profiles": SIM}))]


def test_every_catalog_model_and_alias_is_placed_with_only_its_ready_running_replicas():
    replicas = [Replica("r1", "chat", "n1", state="ready", url="http://10.0.0.1:9000"),
                Replica("r2", "chat", "n2", state="starting", url="http://10.0.0.2:9000"),
                Replica("r3", "chat", "n3", state="ready", url="http://10.0.0.3:9000", desired="stop")]
    placed = placed_models(_entries(), replicas, "engine-key")
    assert set(placed) == {"chat", "talk", "idle"}
    assert placed["chat"].replicas == (("r1", "http://10.0.0.1:9000"),)
    assert placed["talk"].replicas == placed["chat"].replicas and placed["talk"].upstream == "chat"
    assert placed["idle"].replicas == ()  # known, so a request for it is 503, never 404
    assert placed["chat"].settings.context_length == 4096


def test_routes_cross_a_process_without_the_engines_key_and_come_back_with_the_receivers():
    routes = Routes(placed_models(_entries(), [Replica("r1", "chat", "n1", state="ready", url="http://a:1")], "k1"),
                    waits={"idle": "no node has room"}, loading={"chat": "on n2, asked to start"})
    doc = to_doc(routes)
    assert "k1" not in repr(doc)
    back = from_doc(doc, "k2")
    assert back.placed["chat"].replicas == routes.placed["chat"].replicas
    assert back.placed["chat"].api_key == "k2"
    assert (back.waits, back.loading) == (routes.waits, routes.loading)


async def test_a_replica_that_does_not_answer_its_probe_is_left_out_until_its_agent_reports_it():
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        placed = placed_models(_entries(), [Replica("r1", "chat", "n1", state="ready", url=up),
                                            Replica("r2", "chat", "n2", state="ready", url="http://127.0.0.1:9")],
                               None)
        kept = await asyncio.wait_for(probed(placed), 5)
        assert kept["chat"].replicas == (("r1", up),)
    finally:
        await runner.cleanup()


def test_counts_waiting_for_a_round_are_summed_per_level_and_second_not_piled_up():
    waiting = summed([], [["requests", "key", "k", 100, 1]])
    for _ in range(50):  # fifty rounds the leader did not answer
        waiting = summed(waiting, [["requests", "key", "k", 100, 1], ["tokens", "key", "k", 100, 9]])
    assert sorted(waiting) == [["requests", "key", "k", 100, 51], ["tokens", "key", "k", 100, 450]]


def test_counts_waiting_for_a_round_keep_their_tenth_of_a_second_rounded_up_never_down():
    # Rounded down to the second, a count would leave the other control planes' minute up to a
    # second before it left this one's, and let that much more through there.
    waiting = summed([["requests", "key", "k", 100.01, 1]], [["requests", "key", "k", 100.07, 1],
                                                             ["requests", "key", "k", 100.93, 1]])
    assert sorted(waiting) == [["requests", "key", "k", 100.1, 2], ["requests", "key", "k", 101.0, 1]]
