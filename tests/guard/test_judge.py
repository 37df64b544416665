"""The judge: a Qwen3Guard-Gen model asked over HTTP, within the policy's latency_budget.

The judges here are real HTTP servers on loopback answering as Qwen3Guard
does, each slow, hung or failing as a test needs. 127.0.0.2 stands for a
second machine (Linux answers on all of 127/8).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.guard import JudgePolicy
from llmgw.config.types import Duration
from llmgw.events import Events
from llmgw.guard.judge import Judge, JudgeUnavailable, Judgment, parse_judgment, read
from llmgw.guard.judge_check import SpeedCheck, assess, check_speed
from llmgw.router.breaker import Breaker
from llmgw.router.endpoint import Endpoint

UNSAFE_WORDS = {"stab": "Violent", "lockpick": "Non-violent Illegal Acts", "disputed": "Politically Sensitive Topics"}


class VirtualClock:
    """Time that passes only when a judge says it worked: the speed check's figures without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class JudgePeer:
    """A Qwen3Guard-Gen replica: Unsafe when the last message has one of UNSAFE_WORDS.

    With `clock`, its `delay` is spent on that clock rather than slept.
    """

    def __init__(self, host: str = "127.0.0.1", *, delay: float = 0.0, fail: int | None = None,
                 hang: bool = False, controversial: bool = False,
                 clock: VirtualClock | None = None) -> None:
        self.host, self.delay, self.fail, self.hang = host, delay, fail, hang
        self.clock = clock
        self.controversial = controversial
        self.bodies: list[dict] = []
        self.times: list[float] = []
        self.url = ""
        self.runner: web.AppRunner | None = None
        self.released = asyncio.Event()  # ends a hang, so the server can stop

    @property
    def hits(self) -> int:
        return len(self.bodies)

    async def start(self) -> JudgePeer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, 0)
        await site.start()
        self.url = f"http://{self.host}:{site._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.times.append(time.monotonic())
        if self.fail is not None:
            return web.json_response({"error": {"message": "loading"}}, status=self.fail)
        if self.hang:
            await self.released.wait()
        if self.clock is not None:
            self.clock.now += self.delay  # judgments one after another, as a replica on CPUs makes them
        elif self.delay:
            await asyncio.sleep(self.delay)
        last = body["messages"][-1]
        found = [cat for word, cat in UNSAFE_WORDS.items() if word in last["content"]]
        label = ("Controversial" if self.controversial else "Unsafe") if found else "Safe"
        answer = f"Safety: {label}\nCategories: {', '.join(found) or 'None'}"
        if last["role"] == "assistant":
            answer += "\nRefusal: No"
        return web.json_response({"id": "x", "object": "chat.completion", "model": body["model"],
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": answer}}]})

    def endpoint(self, model: str = "qwen3guard") -> Endpoint:
        return Endpoint(id=self.url, model=model, url=self.url, upstream_model=model, breaker=Breaker())


@pytest.fixture
async def peers():
    started: list[JudgePeer] = []

    async def start(host: str = "127.0.0.1", **kw) -> JudgePeer:
        peer = await JudgePeer(host, **kw).start()
        started.append(peer)
        return peer
    yield start
    for peer in started:
        peer.released.set()
        await peer.runner.cleanup()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


def policy(budget: str = "2s", **kw) -> JudgePolicy:
    return JudgePolicy(model="qwen3guard", latency_budget=Duration(budget), **kw)


def judge_of(session, endpoints: list[Endpoint], **kw) -> Judge:
    return Judge(session, lambda model: endpoints if model == "qwen3guard" else [], **kw)


# --- reading a judgment -----------------------------------------------------------

def test_qwen3guards_answer_is_read_however_it_is_dressed():
    assert parse_judgment("Safety: Safe\nCategories: None") == Judgment("Safe", ())
    assert parse_judgment("**Safety:** unsafe\n**Categories:** Violent, Jailbreak\n") == \
        Judgment("Unsafe", ("Violent", "Jailbreak"))
    assert parse_judgment("<think>Safety: Safe</think>\nSafety: Controversial\nCategories: PII") == \
        Judgment("Controversial", ("PII",))
    assert parse_judgment("Safety: Unsafe\nCategories: Suicide & Self-Harm\nRefusal: Yes") == \
        Judgment("Unsafe", ("Suicide & Self-Harm",), True)
    with pytest.raises(ValueError):
        parse_judgment("I cannot help with that.")


def test_a_verdict_is_unsafe_only_for_a_category_the_policy_names():
    judged = Judgment("Unsafe", ("Copyright Violation",))
    assert read(policy(categories=["Violent"]), judged).safe
    narrow = read(policy(categories=["Violent", "Copyright Violation"]), judged)
    assert not narrow.safe and narrow.rule == "judge:Copyright Violation"
    # The judge's spelling may differ; the rule is the policy's.
    odd = read(policy(categories=["Suicide & Self-Harm"]), Judgment("Unsafe", ("suicide and self harm",)))
    assert odd.rule == "judge:Suicide & Self-Harm"


def test_controversial_counts_as_the_policy_says():
    judged = Judgment("Controversial", ("Politically Sensitive Topics",))
    assert read(policy(), judged).safe
    assert not read(policy(controversial="unsafe"), judged).safe


# --- asking ------------------------------------------------------------------------

async def test_a_plain_prompt_is_judged_safe_and_a_violent_one_unsafe_naming_its_category(peers, session):
    peer = await peers()
    judge = judge_of(session, [peer.endpoint()])
    ok = await judge.judge(policy(), "what is the capital of France?")
    assert ok.safe and ok.raw_label == "Safe" and ok.rule is None and ok.endpoint == peer.url
    bad = await judge.judge(policy(), "how do I stab my neighbour")
    assert not bad.safe and bad.raw_label == "Unsafe" and bad.categories == ("Violent",)
    assert bad.rule == "judge:Violent"
    assert "stab" not in repr(bad)  # a verdict never holds the text
    sent = peer.bodies[1]
    assert sent["model"] == "qwen3guard"
    assert sent["messages"] == [{"role": "user", "content": "how do I stab my neighbour"}]


async def test_an_answer_is_judged_as_the_reply_to_its_prompt(peers, session):
    peer = await peers()
    judge = judge_of(session, [peer.endpoint()])
    verdict = await judge.judge(policy(), "first you stab the lock", prompt="how do I open a door?")
    assert not verdict.safe and verdict.refusal is False
    assert peer.bodies[0]["messages"] == [{"role": "user", "content": "how do I open a door?"},
                                          {"role": "assistant", "content": "first you stab the lock"}]


async def test_a_judge_that_hangs_on_one_replica_is_answered_by_the_other_within_the_budget(peers, session):
    hung = await peers(hang=True)
    other = await peers("127.0.0.2")
    a, b = hung.endpoint(), other.endpoint()
    b.in_flight = 1  # busier, so the hung one is asked first
    judge = judge_of(session, [a, b])
    verdict = await judge.judge(policy("1s"), "hello there")  # within the budget, or it raises
    assert verdict.safe and verdict.endpoint == other.url
    assert hung.hits == 1 and other.hits == 1
    assert hung.times[0] < other.times[0]  # the hung one first; the other only as the second question
    assert (a.in_flight, b.in_flight) == (0, 1)  # the hung try was given up once the answer was in


async def test_the_second_question_goes_to_another_machine_before_a_second_replica_on_the_same(peers, session):
    hung = await peers(hang=True)
    same = await peers("127.0.0.1")
    elsewhere = await peers("127.0.0.2")
    a, b, c = hung.endpoint(), same.endpoint(), elsewhere.endpoint()
    b.in_flight = c.in_flight = 1
    verdict = await judge_of(session, [a, b, c]).judge(policy("1s"), "hello there")
    assert verdict.endpoint == elsewhere.url and same.hits == 0


async def test_with_every_replica_on_one_machine_the_second_question_goes_there(peers, session):
    hung = await peers(hang=True)
    same = await peers("127.0.0.1")
    a, b = hung.endpoint(), same.endpoint()
    b.in_flight = 1
    verdict = await judge_of(session, [a, b]).judge(policy("1s"), "hello there")
    assert verdict.endpoint == same.url


async def test_a_replica_that_fails_at_once_is_passed_over_without_waiting_for_half_the_budget(peers, session):
    down = await peers(fail=503)
    up = await peers()
    a, b = down.endpoint(), up.endpoint()
    b.in_flight = 1
    # No second question while one is pending: only passing over the failed one reaches `up`.
    judge = judge_of(session, [a, b], hedge_at=1.0)
    verdict = await judge.judge(policy("4s"), "hello there")
    assert verdict.endpoint == up.url and (down.hits, up.hits) == (1, 1)


async def test_with_every_judge_down_the_judge_is_unavailable_after_the_budget_tried_every_250_ms(peers, session):
    one, two = await peers(fail=503), await peers(fail=502)
    events = Events()
    seen = []
    events.subscribe(seen.append)
    judge = judge_of(session, [one.endpoint(), two.endpoint()], events=events)
    assert judge.retry_every == 0.25
    with pytest.raises(JudgeUnavailable) as raised:
        await judge.judge(policy("1s"), "hello there")
    # Rounds 250 ms apart within 1 s: at most four (at 0, 0.25, 0.5 and 0.75 s), each asking both.
    rounds = max(one.hits, two.hits)
    assert 2 <= rounds <= 4 and abs(one.hits - two.hits) <= 1
    assert raised.value.attempts == one.hits + two.hits and "answered 503" in str(raised.value)
    assert [e.kind for e in seen] == ["judge_unavailable"] and seen[0].subject == "qwen3guard"
    with pytest.raises(JudgeUnavailable):  # the alarm is raised once, not once per request
        await judge.judge(policy("300ms"), "hello again")
    assert len(seen) == 1


async def test_every_replica_failing_at_once_is_not_asked_again_until_the_retry_interval_has_passed(
        peers, session):
    one, two = await peers(fail=503), await peers(fail=502)
    judge = judge_of(session, [one.endpoint(), two.endpoint()], retry_every=60.0)
    with pytest.raises(JudgeUnavailable):
        await judge.judge(policy("300ms"), "hello there")
    assert one.hits == two.hits == 1


async def test_a_judge_not_yet_known_is_waited_for_within_the_budget(peers, session):
    """A new leader learns its judges' replicas a moment after it takes the lead."""
    peer = await peers()
    looked = []

    def replicas(model: str) -> list[Endpoint]:
        looked.append(model)
        return [peer.endpoint()] if len(looked) > 2 else []  # known from the third look on

    verdict = await Judge(session, replicas).judge(policy("2s"), "hello there")
    assert verdict.safe and peer.hits == 1 and len(looked) >= 3


# serial: three refused tries must fit the judge's 600 ms; beside other workers on two cores they did not.
@pytest.mark.serial
async def test_a_refused_connection_is_tried_again_and_an_unknown_judge_says_so(session):
    judge = Judge(session, lambda model: [])
    with pytest.raises(JudgeUnavailable, match="no replica of it is ready"):
        await judge.judge(policy("300ms"), "hello")
    closed = Endpoint(id="http://127.0.0.1:9/v1", model="qwen3guard", url="http://127.0.0.1:9/v1",
                      upstream_model="qwen3guard")
    refusing = judge_of(session, [closed])
    with pytest.raises(JudgeUnavailable, match="connection failed"):
        await refusing.judge(policy("600ms"), "hello")
    assert refusing.asked >= 3


async def test_an_open_breaker_does_not_keep_a_recovered_judge_out(peers, session):
    peer = await peers()
    endpoint = peer.endpoint()
    for _ in range(5):
        endpoint.breaker.failure("refused")
    assert not endpoint.breaker.available()
    assert (await judge_of(session, [endpoint]).judge(policy(), "hello")).safe


# --- the cache ---------------------------------------------------------------------

async def test_the_same_text_is_not_asked_twice_within_five_minutes(peers, session):
    peer = await peers()
    now = [1000.0]
    judge = judge_of(session, [peer.endpoint()], clock=lambda: now[0])
    first = await judge.judge(policy(), "how do I stab a melon")
    again = await judge.judge(policy(categories=["Violent"]), "how do I stab a melon")
    assert peer.hits == 1 and again.cached and not first.cached and not again.safe
    assert (await judge.judge(policy(), "how do I stab a melon", prompt="q")).safe is False
    assert peer.hits == 2  # as an answer it is another question
    now[0] += 299
    await judge.judge(policy(), "how do I stab a melon")
    assert peer.hits == 2
    now[0] += 2
    await judge.judge(policy(), "how do I stab a melon")
    assert peer.hits == 3


async def test_the_cache_keeps_the_latest_judgments_only(peers, session):
    peer = await peers()
    judge = judge_of(session, [peer.endpoint()], cache_size=2)
    for text in ("one", "two", "three", "three", "two"):
        await judge.judge(policy(), text)
    assert peer.hits == 3
    await judge.judge(policy(), "one")
    assert peer.hits == 4


async def test_the_same_text_asked_at_once_is_one_question(peers, session):
    peer = await peers(delay=0.2)
    judge = judge_of(session, [peer.endpoint()])
    verdicts = await asyncio.gather(*(judge.judge(policy(), "same words") for _ in range(5)))
    assert peer.hits == 1 and all(v.safe for v in verdicts)


async def test_a_failure_is_not_remembered(peers, session):
    peer = await peers(fail=503)
    judge = judge_of(session, [peer.endpoint()])
    with pytest.raises(JudgeUnavailable):
        await judge.judge(policy("100ms"), "hello")
    peer.fail = None
    assert (await judge.judge(policy(), "hello")).safe


async def test_a_text_longer_than_one_judgment_reads_is_judged_in_pieces(peers, session):
    peer = await peers()
    text = "calm words " * 500 + "then stab"  # about 5,500 characters
    verdict = await judge_of(session, [peer.endpoint()]).judge(policy(), text)
    assert not verdict.safe and peer.hits == 2
    assert all(len(b["messages"][-1]["content"]) <= 4000 for b in peer.bodies)


# --- a streamed answer ---------------------------------------------------------------

async def test_a_streamed_answer_is_judged_every_600_characters_and_at_its_end(peers, session):
    peer = await peers()
    judge = judge_of(session, [peer.endpoint()])
    stream = judge.judge_stream(policy(), prompt="tell me a story")
    text = "".join(f"{i:04d} " for i in range(300))  # 1,500 characters, in events of 100
    for i in range(0, len(text), 100):
        stream.feed(text[i:i + 100])
    assert stream.requested == 2  # at 600 and at 1,200
    final = await stream.close()
    assert final.safe and stream.requested == 3 and peer.hits == 3
    # Each judgment reads what is new, with a little before it as context.
    assert [len(b["messages"][-1]["content"]) for b in peer.bodies] == [600, 900, 600]
    assert all(b["messages"][0]["content"] == "tell me a story" for b in peer.bodies)


async def test_a_streamed_answer_that_turns_unsafe_is_seen_while_it_streams(peers, session):
    peer = await peers()
    stream = judge_of(session, [peer.endpoint()]).judge_stream(policy())
    stream.feed("x" * 650)
    stream.feed("and then you stab " + "y" * 600)
    seen = []
    for _ in range(50):
        seen += stream.ready()
        if stream.unsafe:
            break
        await asyncio.sleep(0.02)
    assert stream.unsafe is not None and stream.unsafe.rule == "judge:Violent"
    assert any(not v.safe for v in seen)
    stream.feed("more")
    assert (await stream.close()).rule == "judge:Violent"


async def test_verdicts_of_a_stream_can_be_read_as_they_come(peers, session):
    peer = await peers(delay=0.05)
    stream = judge_of(session, [peer.endpoint()]).judge_stream(policy(), every=10)
    for word in ("hello world ", "and more words ", "the end"):
        stream.feed(word)
    closing = asyncio.ensure_future(stream.close())
    got = [v async for v in stream]
    await closing
    assert len(got) == stream.requested == 3


async def test_a_stream_whose_judge_is_down_raises_at_its_end(peers, session):
    peer = await peers(fail=503)
    stream = judge_of(session, [peer.endpoint()]).judge_stream(policy("200ms"))
    stream.feed("z" * 700)
    with pytest.raises(JudgeUnavailable):
        await stream.close()


# --- ctl guard judge check --------------------------------------------------------------

async def test_a_judge_that_keeps_up_is_ok(peers, session):
    clock = VirtualClock()
    peer = await peers(delay=0.01, clock=clock)
    check = await check_speed(session, [peer.endpoint()], policy("1s"), burst=4, clock=clock)
    assert check.state == "ok" and len(check.alone) == 3 and len(check.burst_times) == 4
    assert check.advice == [] and peer.hits == 7  # each text differs: none from the cache
    assert len({b["messages"][0]["content"] for b in peer.bodies}) == 7
    assert 1000 < len(peer.bodies[0]["messages"][0]["content"]) < 1400  # about 280 tokens


async def test_a_judge_that_a_busy_moment_takes_past_the_budget_is_tight(peers, session):
    clock = VirtualClock()
    peer = await peers(delay=0.1, clock=clock)  # one judgment at a time, as on a CPU
    check = await check_speed(session, [peer.endpoint()], policy("500ms"), burst=8, clock=clock)
    assert check.state == "tight", check
    # Each alone in 0.1 s; the eighth of a burst waits for the seven before it.
    assert max(check.alone) == pytest.approx(0.1) and max(check.burst_times) == pytest.approx(0.8)
    assert any("latency_budget" in a for a in check.advice) and any("fail: open" in a for a in check.advice)


async def test_a_judge_slower_than_the_budget_alone_is_slow(peers, session):
    clock = VirtualClock()
    peer = await peers(delay=0.3, clock=clock)
    check = await check_speed(session, [peer.endpoint()], policy("250ms"), burst=2, clock=clock)
    assert check.state == "slow" and check.alone == pytest.approx([0.3] * 3)


def test_a_judgment_past_half_the_budget_alone_is_tight():
    check = SpeedCheck("j", 1, 5.0, [2.6, 2.4, 2.5], 8, [3.0] * 8, 3.5, [])
    assert assess(check).state == "tight"
    check = SpeedCheck("j", 1, 5.0, [2.4, 2.3, 2.3], 4, [6.1] * 4, 6.5, [])
    assert assess(check).state == "tight"
    check = SpeedCheck("j", 1, 5.0, [], 4, [], 0.0, ["no replica of it is ready"])
    assert assess(check).state == "unavailable"


@pytest.fixture
async def admin_api(tmp_path):
    """The admin API's GET /api/v1/config, as a control plane answers it."""
    state = {"settings": {}}

    async def config(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer " + "t" * 40
        return web.json_response({"version": 3, "value": state["settings"]})

    app = web.Application()
    app.router.add_get("/api/v1/config", config)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token = tmp_path / "admin-token"
    token.write_text("t" * 40)
    os.chmod(token, 0o600)
    state["args"] = ["--admin", f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}", "--token-file", str(token)]
    yield state
    await runner.cleanup()


def ctl(argv: list[str]) -> int:
    import argparse

    from llmgw.cli import guard
    from llmgw.cli.main import admin_options

    parser = argparse.ArgumentParser(prog="llmgw ctl")
    guard.register(parser.add_subparsers(), admin_options())
    args = parser.parse_args(argv)
    return args.run(args)


async def test_ctl_guard_judge_check_times_the_policys_judge_from_the_settings(peers, admin_api, capsys):
    peer = await peers(delay=0.01)
    admin_api["settings"] = {
        "models": [{"name": "qwen3guard", "endpoints": [peer.url]}],
        "guard": {"policies": {"baseline": {"judge": {"model": "qwen3guard", "latency_budget": "2s"}},
                               "plain": {}}},
    }
    rc = await asyncio.to_thread(ctl, ["guard", "judge", "check", "--policy", "baseline", *admin_api["args"]])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "qwen3guard, 1 replica(s), a request waits 2.0 s for it (policy baseline)" in out
    assert "alone: " in out and "8 at once: slowest" in out and out.rstrip().splitlines()[-1].startswith("ok:")
    rc = await asyncio.to_thread(ctl, ["guard", "judge", "check", "--json", *admin_api["args"]])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["checks"][0]["state"] == "ok" and doc["checks"][0]["policies"] == "baseline"


async def test_ctl_guard_judge_check_says_what_is_missing(admin_api):
    from llmgw.control.adminclient import AdminError

    admin_api["settings"] = {"guard": {"policies": {"plain": {}}}}
    with pytest.raises(AdminError, match="the guard policy plain has no judge"):
        await asyncio.to_thread(ctl, ["guard", "judge", "check", "--policy", "plain", *admin_api["args"]])
    # A judge the settings give no endpoints is one the cluster places, which the control plane times; this
    # stand-in is a control plane without that route, as an older llmgw is during an upgrade.
    admin_api["settings"] = {"guard": {"policies": {"p": {"judge": {"model": "qwen3guard"}}}}}
    with pytest.raises(AdminError) as older:
        await asyncio.to_thread(ctl, ["guard", "judge", "check", *admin_api["args"]])
    assert str(older.value) == ("this control plane does not time the judges it places (its llmgw is older than "
                                "this one); give them with --endpoint URL, the judge replicas' addresses")
