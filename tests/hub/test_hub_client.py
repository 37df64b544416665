"""llmgw's hub client against a hub that answers what it should not: each answer refused in a sentence, the token
never taken anywhere but the hub (the well-behaved hub is tests/support/hfhub.py, in the pinning tests)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.hub import Hub, HubError

COMMIT = "a" * 40


async def serve(routes: dict[str, web.Response | object]) -> TestServer:
    async def handle(request: web.Request) -> web.StreamResponse:
        answer = routes[request.path]
        return answer(request) if callable(answer) else answer

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    return server


async def test_a_listing_that_continues_at_another_address_is_not_followed_with_the_token(tmp_path):
    elsewhere = await serve({})
    hub = await serve({
        "/api/models/org/repo/revision/main": web.json_response({"sha": COMMIT}),
        f"/api/models/org/repo/tree/{COMMIT}": web.json_response(
            [], headers={"Link": f'<{elsewhere.make_url("/steal")}>; rel="next"'}),
    })
    token = tmp_path / "token"
    token.write_text("hf_secret\n")
    try:
        with pytest.raises(HubError) as refused:
            await Hub(str(hub.make_url("")), str(token)).repo("org/repo")
        assert "continues at another address" in str(refused.value) and "hf_secret" not in str(refused.value)
    finally:
        await hub.close()
        await elsewhere.close()


@pytest.mark.parametrize("info, said", [
    ({"sha": "../../admin"}, "which is not one (40 hexadecimal digits)"),
    ({"id": "org/repo"}, "without the commit"),
    ([1, 2, 3], "without the commit"),
])
async def test_a_hub_answering_no_commit_or_not_one_is_refused_saying_so(info, said):
    hub = await serve({"/api/models/org/repo/revision/main": web.json_response(info)})
    try:
        with pytest.raises(HubError) as refused:
            await Hub(str(hub.make_url(""))).repo("org/repo")
        assert said in str(refused.value)
    finally:
        await hub.close()


async def test_a_listing_entry_without_its_fields_is_refused_not_a_traceback():
    hub = await serve({
        "/api/models/org/repo/revision/main": web.json_response({"sha": COMMIT}),
        f"/api/models/org/repo/tree/{COMMIT}": web.json_response([{"type": "file", "lfs": {"oid": "x"}}]),
    })
    try:
        with pytest.raises(HubError) as refused:
            await Hub(str(hub.make_url(""))).repo("org/repo")
        assert "has an entry llmgw cannot read" in str(refused.value)
    finally:
        await hub.close()


async def test_an_answer_that_is_not_json_is_refused_naming_the_address():
    hub = await serve({"/api/models/org/repo/revision/main": web.Response(text="<html>proxy login</html>")})
    try:
        with pytest.raises(HubError) as refused:
            await Hub(str(hub.make_url(""))).repo("org/repo")
        assert "with something that is not JSON" in str(refused.value)
    finally:
        await hub.close()
