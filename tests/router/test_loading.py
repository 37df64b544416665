"""A request for a catalog model with no replica ready waits for one to load, saying so, or is refused saying why."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.config.router import ModelSettings
from llmgw.config.server import ClusterSettings
from llmgw.config.types import Duration
from llmgw.router import loading
from llmgw.router.call import Call, Refuse
from llmgw.router.demand import DemandRecord
from llmgw.router.registry import Placed, Registry

URL = "http://10.0.0.7:8001/v1"


def _placed(name: str = "picture", replicas=(), *, alias: str = "", **marks) -> dict[str, Placed]:
    marks.setdefault("on_demand", True)
    placed = {name: Placed(ModelSettings(name=name), tuple(replicas), upstream=name, **marks)}
    if alias:
        placed[alias] = Placed(ModelSettings(name=alias), tuple(replicas), upstream=name, **marks)
    return placed


def _router(placed: dict[str, Placed]) -> SimpleNamespace:
    registry = Registry()
    registry.apply(ClusterSettings())
    registry.set_placed(placed)
    return SimpleNamespace(registry=registry, demand=DemandRecord())


def _call(router, name: str, *, stream: bool = False, api: str = "chat") -> Call:
    return Call(id="req_1", api=api, principal=None, model=router.registry.model(name),
                upstream_path="/chat/completions", upstream_body={}, stream=stream, wants_usage=False,
                profile="chat", session_key=None, band=None)


def _request(closing: bool = False):
    return SimpleNamespace(transport=SimpleNamespace(is_closing=lambda: closing))


@pytest.fixture(autouse=True)
def quick_comments(monkeypatch):
    monkeypatch.setattr(loading, "COMMENT_EVERY", 0.05)


async def test_a_request_for_an_on_demand_model_waits_for_its_replica_asking_for_it_meanwhile():
    router = _router(_placed(alias="pic"))
    call = _call(router, "pic")
    waiting = asyncio.create_task(loading.until_ready(router, _request(), call, Duration("1m")))
    await asyncio.sleep(0.1)
    # Asked under the catalog's name, whichever alias the client used.
    assert not waiting.done() and set(router.demand.read()[0]) == {"picture"}
    router.registry.set_placed(_placed(replicas=[("s1", URL)], alias="pic"))
    assert await asyncio.wait_for(waiting, 2) is True
    assert [e.url for e in call.model.usable()] == [URL] and call.load_wait is not None
    asked, used = router.demand.read()
    assert asked == {} and "picture" in used


async def test_a_model_with_a_replica_ready_is_not_waited_for_and_its_use_is_noted():
    router = _router(_placed(replicas=[("s1", URL)]))
    call = _call(router, "picture")
    assert await loading.until_ready(router, _request(), call, Duration("1m")) is False
    assert "picture" in router.demand.read()[1]


async def test_a_stopped_model_is_refused_at_once_saying_an_administrator_stopped_it():
    router = _router(_placed(stopped=True))
    with pytest.raises(Refuse) as refused:
        await asyncio.wait_for(loading.until_ready(router, _request(), _call(router, "picture"), Duration("1m")), 1)
    assert refused.value.status == 503 and refused.value.code == "model_stopped"
    assert refused.value.message == ("picture is stopped by an administrator and takes no requests until it is "
                                     "started again")
    assert router.demand.read()[0] == {}


async def test_a_model_stopped_while_a_request_waits_for_it_is_refused_then():
    router = _router(_placed())
    waiting = asyncio.create_task(loading.until_ready(router, _request(), _call(router, "picture"), Duration("1m")))
    await asyncio.sleep(0.1)
    router.registry.set_placed(_placed(stopped=True))
    with pytest.raises(Refuse) as refused:
        await asyncio.wait_for(waiting, 2)
    assert refused.value.code == "model_stopped"


async def test_a_wait_past_the_load_timeout_is_refused_with_the_reason_placement_gives_and_retry_after():
    router = _router(_placed())
    router.registry.set_notes({"picture": "the room it needs is held by on-demand mesh (r_1) on gpu-1, idle 5s of "
                                          "its 2m"}, {})
    with pytest.raises(Refuse) as refused:
        await loading.until_ready(router, _request(), _call(router, "picture"), Duration("200ms"))
    r = refused.value
    assert r.status == 503 and r.code == "model_not_loaded" and r.headers["Retry-After"] == "30"
    assert r.message == ("picture did not load within router.timeouts.load (200ms): the room it needs is held by "
                         "on-demand mesh (r_1) on gpu-1, idle 5s of its 2m; try again later")
    assert r.headers["x-llmgw-loading"] == "picture"


async def test_a_model_that_is_not_on_demand_and_cannot_be_placed_is_refused_at_once_with_why():
    router = _router(_placed(on_demand=False))
    router.registry.set_notes({"picture": "fits on no node: cpu-1: not enough memory"}, {})
    with pytest.raises(Refuse) as refused:
        await asyncio.wait_for(loading.until_ready(router, _request(), _call(router, "picture"), Duration("1m")), 1)
    assert refused.value.status == 503 and refused.value.message == (
        "picture has no replica ready: fits on no node: cpu-1: not enough memory")


async def test_a_model_that_is_not_on_demand_is_waited_for_while_its_replica_starts():
    router = _router(_placed(on_demand=False))
    router.registry.set_notes({}, {"picture": "on cpu-1, its engine starting"})
    call = _call(router, "picture")
    waiting = asyncio.create_task(loading.until_ready(router, _request(), call, Duration("1m")))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    router.registry.set_placed(_placed(replicas=[("s1", URL)], on_demand=False))
    assert await asyncio.wait_for(waiting, 2) is True


async def test_a_client_that_leaves_a_request_that_is_not_streamed_ends_its_wait():
    router = _router(_placed())
    with pytest.raises(Refuse) as refused:
        await asyncio.wait_for(loading.until_ready(router, _request(closing=True), _call(router, "picture"),
                                                   Duration("1m")), 2)
    assert refused.value.code == "client_gone"


# -- what a streamed request's client reads, through the SDKs --------------------------------------------------

CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "picture",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a picture"}, "finish_reason": None}]}


async def _serve(router, timeout: str, calls: list | None = None):
    """A client API whose answer waits for the model as the router's does, then answers with one chunk.

    Each request's call is appended to `calls`, so a test can see its wait begin (its stream prepared)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        call = _call(router, "picture", stream=True)
        if calls is not None:
            calls.append(call)
        try:
            await loading.until_ready(router, request, call, Duration(timeout))
        except Refuse as refused:
            return await loading.refuse_in_stream(call, refused)
        await call.prepared.write(b"data: " + orjson.dumps(CHUNK) + b"\n\ndata: [DONE]\n\n")
        await call.prepared.write_eof()
        return call.prepared

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    server = TestServer(app)
    await server.start_server()
    return server


def _client(server) -> openai.AsyncOpenAI:
    # Closed by each test: an unclosed one is closed by the garbage collector in
    # whichever test runs next, after this test's loop is gone, and logs there.
    return openai.AsyncOpenAI(api_key="k", base_url=str(server.make_url("/v1")), max_retries=0)


async def test_a_streamed_request_is_told_it_waits_and_the_openai_sdk_reads_the_answer_after_the_comments():
    router = _router(_placed())
    router.registry.set_notes({}, {"picture": "on gpu-1, 40% of its weights fetched"})
    calls: list = []
    server = await _serve(router, "1m", calls)
    client = _client(server)
    try:

        async def load_later():
            # Once the request is waiting, its stream begun: a fixed 0.3 s was not always enough for the request
            # to arrive on a loaded machine, and a model ready before it asks is never waited for (CI).
            while not (calls and calls[0].prepared is not None):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            router.registry.set_placed(_placed(replicas=[("s1", URL)]))

        loader = asyncio.create_task(load_later())
        raw = await client.chat.completions.with_raw_response.create(
            model="picture", messages=[{"role": "user", "content": "draw"}], stream=True)
        assert raw.headers["x-llmgw-loading"] == "picture"
        text = "".join([c.choices[0].delta.content or "" async for c in raw.parse()])
        assert text == "a picture"
        await loader
    finally:
        await client.close()
        await server.close()


async def test_a_streamed_request_whose_model_does_not_load_in_time_ends_with_an_error_the_sdk_raises():
    router = _router(_placed())
    router.registry.set_notes({"picture": "fits on no node: there are no nodes"}, {})
    server = await _serve(router, "200ms")
    client = _client(server)
    try:
        stream = await client.chat.completions.create(model="picture", messages=[{"role": "user", "content": "x"}],
                                                      stream=True)
        with pytest.raises(openai.APIError) as failed:
            async for _ in stream:
                pass
        assert "did not load within router.timeouts.load (200ms): fits on no node: there are no nodes" in str(
            failed.value.message)
    finally:
        await client.close()
        await server.close()


def test_the_waiting_comments_are_skipped_by_both_sdks_stream_readers():
    registry = Registry()
    registry.set_notes({"picture": "waiting for mesh (r_1) to give back room on gpu-1\nsecond line"}, {})
    comment = loading._comment("picture", "picture", registry)
    assert comment == (b": waiting for picture to load: "
                       b"waiting for mesh (r_1) to give back room on gpu-1 second line\n\n")
    data = comment * 3 + b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    for decoder in (openai._streaming.SSEDecoder(), anthropic._streaming.SSEDecoder()):
        events = list(decoder.iter_bytes(iter([data])))
        assert [(e.event, e.data) for e in events] == [("message_stop", '{"type": "message_stop"}')]
