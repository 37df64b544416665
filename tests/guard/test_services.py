"""Outside guardrail services, asked over HTTP: a real local server plays Lakera."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.bodytemplate import render_body, validate_body_template
from llmgw.config.guard import Service
from llmgw.config.loader import Invalid
from llmgw.config.types import Duration
from llmgw.events import Events
from llmgw.guard.services import (
    Reading,
    Services,
    ServiceUnavailable,
    merge_services,
    reason_token,
)


class GuardPeer:
    def __init__(self) -> None:
        self.answer: object = {"flagged": False}
        self.status = 200
        self.delay = 0.0
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def guard(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        self.headers.append(dict(request.headers))
        if self.delay:
            await asyncio.sleep(self.delay)
        answer = self.answer(json.loads(self.bodies[-1])) if callable(self.answer) else self.answer
        return web.json_response(answer, status=self.status)


@pytest.fixture
async def peer():
    state = GuardPeer()
    app = web.Application()
    app.router.add_post("/v2/guard", state.guard)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v2/guard"
    yield state
    state.delay = 0
    await runner.cleanup()


@pytest.fixture
async def services():
    async with aiohttp.ClientSession() as session:
        yield Services(session)


def lakera(url: str, **kw) -> Service:
    kw.setdefault("blocked", "flagged")
    return Service(name="lakera", url=url, **kw)


# --- the body --------------------------------------------------------------------

async def test_the_body_template_is_given_the_text_as_a_json_string(peer, services):
    service = lakera(peer.url, body='{"messages": [{"role": "user", "content": {{json .Text}}}]}')
    text = 'say "hi"\nto Ayşe \\ now'
    assert (await services.check(service, text)).safe
    assert json.loads(peer.bodies[0]) == {"messages": [{"role": "user", "content": text}]}


async def test_an_empty_body_sends_the_text_as_input(peer, services):
    await services.check(lakera(peer.url), "hello")
    assert json.loads(peer.bodies[0]) == {"input": "hello"}
    assert render_body("", "x") == b'{"input": "x"}'


def test_a_body_with_anything_but_json_text_is_refused_at_validation():
    validate_body_template('{"input": {{json .Text}}, "also": {{ json .Text }}}')
    validate_body_template("")
    with pytest.raises(Invalid, match=r"\{\{.Text\}\} is not something the gateway fills in") as e:
        validate_body_template('{"input": {{.Text}}}')
    assert e.value.key == "body"
    with pytest.raises(Invalid, match="not something the gateway fills in"):
        validate_body_template('{"who": {{json .User}}}')
    with pytest.raises(Invalid, match="goes in without them"):
        validate_body_template('{"input": "{{json .Text}}"}')
    with pytest.raises(Invalid, match="does not make"):
        validate_body_template('{"input": {{json .Text}}, "x": "{{"}')


# --- headers ---------------------------------------------------------------------------

async def test_a_header_file_is_read_again_at_each_call(peer, services, tmp_path):
    key = tmp_path / "lakera"
    key.write_text("Bearer first\n")
    service = lakera(peer.url, header_files={"Authorization": str(key)})
    await services.check(service, "hello")
    key.write_text("Bearer rotated\n")
    await services.check(service, "hello")
    assert [h["Authorization"] for h in peer.headers] == ["Bearer first", "Bearer rotated"]


async def test_a_header_file_that_cannot_be_read_fails_the_call_without_asking(peer, services, tmp_path):
    service = lakera(peer.url, header_files={"Authorization": str(tmp_path / "missing")})
    with pytest.raises(ServiceUnavailable, match="cannot be read"):
        await services.check(service, "hello")
    assert peer.bodies == []


async def test_the_service_is_told_the_text_and_nothing_of_who_sent_it(peer, services):
    await services.check(lakera(peer.url), "hello")
    sent = {k.lower() for k in peer.headers[0]}
    assert not sent & {"authorization", "x-request-id", "x-llmgw-key", "x-forwarded-for"}


# --- reading the answer -----------------------------------------------------------------

@pytest.mark.parametrize("value, unsafe", [
    (True, True), (False, False), (1, True), (0.7, True), (0, False), (-1, False),
    (["jailbreak"], True), ([], False), ("yes", True), ("false", False), ("False", False), ({"a": 1}, True),
])
async def test_blocked_reads_true_a_positive_number_a_list_or_a_string_but_false_as_unsafe(
        peer, services, value, unsafe):
    peer.answer = {"results": [{"flagged": value}]}
    verdict = await services.check(lakera(peer.url, blocked="results.0.flagged"), "hello")
    assert verdict.safe is (not unsafe)


@pytest.mark.parametrize("answer", [{"flagged": None}, {"other": True}, {"results": []}, [1, 2]])
async def test_a_blocked_path_that_is_null_or_missing_is_a_failed_call_not_a_safe_one(peer, services, answer):
    peer.answer = answer
    with pytest.raises(ServiceUnavailable, match="did not say at flagged"):
        await services.check(lakera(peer.url), "hello")


async def test_the_rule_names_the_service_and_its_reason(peer, services):
    peer.answer = {"flagged": True, "breakdown": [{"detector_type": "Prompt Attack / Injection"}]}
    verdict = await services.check(lakera(peer.url, reason="breakdown.0.detector_type"), "hello")
    assert verdict.rule == "service:lakera:prompt_attack_injection" and verdict.action == "block"
    peer.answer = {"flagged": True}
    assert (await services.check(lakera(peer.url, reason="breakdown.0.detector_type"), "x")).rule == \
        "service:lakera:unsafe"
    assert reason_token("x" * 100) == "x" * 40
    assert reason_token({"hate": 0.9}) == "hate"


async def test_a_service_that_does_not_answer_in_time_is_unavailable(peer, services):
    peer.delay = 1.0
    with pytest.raises(ServiceUnavailable, match="did not answer within 0.2 s"):
        await services.check(lakera(peer.url, timeout=Duration("200ms")), "hello")


@pytest.mark.parametrize("status", [500, 401, 429])
async def test_a_service_that_answers_an_error_is_unavailable(peer, services, status):
    peer.status = status
    with pytest.raises(ServiceUnavailable, match=f"answered {status}"):
        await services.check(lakera(peer.url), "hello")


async def test_an_unavailable_service_is_announced_once_an_hour(peer):
    events = Events()
    seen = []
    events.subscribe(seen.append)
    peer.status = 503
    async with aiohttp.ClientSession() as session:
        services = Services(session, events=events)
        for _ in range(3):
            with pytest.raises(ServiceUnavailable):
                await services.check(lakera(peer.url), "hello")
    assert [(e.kind, e.subject) for e in seen] == [("service_unavailable", "lakera")]
    assert "hello" not in json.dumps(seen[0].to_dict())


# --- a policy's services together ------------------------------------------------------------

async def test_check_all_asks_the_services_of_the_direction_and_says_which_objected(peer, services):
    peer.answer = lambda body: {"flagged": "stab" in body["input"]}
    dead = Service(name="azure", url="http://127.0.0.1:9/guard", blocked="x", on="both")
    flagger = Service(name="mine", url=peer.url, blocked="flagged", on="output", action="flag")
    results = await services.check_all([lakera(peer.url), dead, flagger], "how to stab", "input")
    assert [v.rule for v in results.unsafe] == ["service:lakera:unsafe"] and results.blocked
    assert [u.service for u in results.unavailable] == ["azure"]
    output = await services.check_all([lakera(peer.url), flagger], "how to stab", "output")
    assert [v.rule for v in output.unsafe] == ["service:mine:unsafe"] and not output.blocked


def test_two_policies_naming_one_service_are_one_call_read_the_stricter_way():
    lenient = Service(name="lakera", url="https://g.example/v2", blocked="flagged", action="flag", on="input",
                      timeout=Duration("1s"))
    strict = Service(name="lakera", url="https://g.example/v2", blocked="results.0.flagged", action="block",
                     on="output", reason="breakdown.0.detector_type", timeout=Duration("2s"))
    [one] = merge_services([lenient, strict])
    assert one.blocked == ("flagged", "results.0.flagged") and one.action == "block" and one.on == "both"
    assert one.reasons == ("breakdown.0.detector_type",) and one.timeout == 2.0
    elsewhere = Service(name="lakera", url="https://other.example/v2", blocked="flagged")
    assert len(merge_services([lenient, elsewhere])) == 2  # different requests: each is asked


async def test_the_stricter_reading_wins_when_either_path_says_unsafe(peer, services):
    peer.answer = {"flagged": False, "results": [{"flagged": True}]}
    lenient = lakera(peer.url, action="flag")
    strict = lakera(peer.url, blocked="results.0.flagged")
    results = await services.check_all([lenient, strict], "hello", "input")
    assert len(peer.bodies) == 1  # one call
    assert [(v.service, v.action) for v in results.unsafe] == [("lakera", "block")]
    assert isinstance(merge_services([lenient])[0], Reading)


# --- services under a policy that only observes --------------------------------------

async def test_a_policy_that_only_observes_records_what_its_service_would_have_blocked(peer):
    # Observed services were told apart from enforced ones by a name their policy's wrapper does not have:
    # every request under an observing policy with a service failed (AttributeError) before one was asked.
    from llmgw.config.guard import Policy
    from llmgw.guard.decisions import Decisions
    from llmgw.guard.policy import combine_policies
    from llmgw.guard.review import Reviewers, review_input

    peer.answer = {"flagged": True}
    watching = ("watch", Policy(mode="observe", services=[lakera(peer.url)]))
    decisions = Decisions()
    async with aiohttp.ClientSession() as session:
        reviewers = Reviewers(session, lambda model: [])
        assert await review_input(reviewers, combine_policies([watching]), "how to stab", decisions) is None
        assert [d.as_dict() for d in decisions.items] == [
            {"rule": "service:lakera:unsafe", "action": "would_block", "direction": "input"}]
        # Enforced by one policy and observed by another, the service is asked once, and its answer enforced.
        enforcing = ("guard", Policy(mode="enforce", services=[lakera(peer.url)]))
        refusal = await review_input(reviewers, combine_policies([enforcing, watching]), "how to stab", Decisions())
        assert refusal is not None and refusal.rule == "service:lakera:unsafe"
    assert len(peer.bodies) == 2
