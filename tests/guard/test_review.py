"""The judge and services on one request's answer, through the OutputChecker and the stream's ChunkGuard.

The judges are real HTTP servers on loopback answering as Qwen3Guard-Gen
does (test_judge.JudgePeer): "stab" is Violent.
"""

from __future__ import annotations

import asyncio

import pytest
from test_judge import peers, policy, session  # noqa: F401  fixtures and helpers of the judge's tests

from llmgw.config.guard import Policy, Rules
from llmgw.guard.decisions import Decisions
from llmgw.guard.gate import OutputChecker
from llmgw.guard.policy import combine_policies
from llmgw.guard.redact import Redactor
from llmgw.guard.review import OutputReview, Reviewers
from llmgw.router.guarded import ChunkGuard

SENTENCE = "The weather in the valley stays mild through the week, with light wind. "


def _policy(stream: str = "sentence", budget: str = "2s") -> object:
    return combine_policies([("p", Policy(mode="enforce", stream=stream,
                                          judge=policy(budget, on="output", categories=["Violent"])))])


def _checker(session, peer, stream: str = "sentence", redactor: Redactor | None = None):
    effective = _policy(stream)
    reviewers = Reviewers(session, lambda model: [peer.endpoint()] if model == "qwen3guard" else [])
    decisions = Decisions()
    review = OutputReview(reviewers, effective, decisions, prompt="What is the weather?")
    return OutputChecker(effective, redactor, review, decisions)


def _chunk(content: str | None, finish: str | None = None) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _finishes(chunks: list[dict]) -> list[str]:
    return [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]


async def test_a_long_answer_is_stopped_mid_stream_once_a_background_judgment_objects(session, peers):
    peer = await peers()
    guard = ChunkGuard(_checker(session, peer))
    sent: list[dict] = []
    # Past 600 characters a judgment starts in the background, on what was released.
    opening = "How to stab a tyre. " + SENTENCE * 9
    for word in opening.split(" "):
        sent += await guard.arewrite(_chunk(word + " "))
    assert _text(sent).startswith("How to stab a tyre.")  # released before the judge has read it
    for _ in range(500):
        if guard.checker.poll():
            break
        await asyncio.sleep(0.01)
    assert peer.hits == 1
    more = await guard.arewrite(_chunk("And then some more. "))
    assert _finishes(more) == ["content_filter"] and _text(more) == ""
    assert await guard.arewrite(_chunk(None, "stop")) == []
    assert [d.as_dict() for d in guard.checker.decisions] == [
        {"rule": "judge:Violent", "action": "block", "direction": "output"}]


async def test_the_answers_end_waits_for_the_last_judgment_and_its_text_comes_before_it(session, peers):
    peer = await peers()
    guard = ChunkGuard(_checker(session, peer))
    out = await guard.arewrite(_chunk("It stays mild. It will"))
    # The engine's last chunk carries text as well as the end: the text first, then the end.
    out += await guard.arewrite(_chunk(" rain on Sunday.", "stop"))
    assert _text(out) == "It stays mild. It will rain on Sunday."
    assert _finishes(out) == ["stop"] and out[-1]["choices"][0]["finish_reason"] == "stop"
    assert peer.hits >= 1


async def test_buffer_all_releases_nothing_before_the_judge_has_read_it_all(session, peers):
    peer = await peers()
    guard = ChunkGuard(_checker(session, peer, stream="buffer_all"))
    out = []
    for part in ("It stays mild. ", "Then stab ", "the tyres."):
        out += await guard.arewrite(_chunk(part))
    assert _text(out) == ""
    out += await guard.arewrite(_chunk(None, "stop"))
    assert _text(out) == "" and _finishes(out) == ["content_filter"]


async def test_the_judge_reads_placeholders_where_the_client_reads_its_restored_values(session, peers):
    peer = await peers()
    redactor = Redactor()
    placeholder = redactor.placeholder("email", "ayse@example.com")
    effective = combine_policies([("p", Policy(
        mode="enforce", input=Rules(pii={"email": "redact"}, restore=True),
        judge=policy("2s", on="output", categories=["Violent"])))])
    reviewers = Reviewers(session, lambda model: [peer.endpoint()])
    decisions = Decisions()
    checker = OutputChecker(effective, redactor, OutputReview(reviewers, effective, decisions, "hi"), decisions)
    guard = ChunkGuard(checker)
    out = await guard.arewrite(_chunk(f"Write to {placeholder}."))
    out += await guard.arewrite(_chunk(None, "stop"))
    assert _text(out) == "Write to ayse@example.com."
    assert peer.bodies[-1]["messages"][-1]["content"] == f"Write to {placeholder}."


def test_conceal_puts_a_requests_values_back_as_their_placeholders():
    redactor = Redactor()
    email = redactor.placeholder("email", "ayse@example.com")
    name = redactor.placeholder("person", "Ayşe Yılmaz")
    assert redactor.conceal("Ayşe Yılmaz <ayse@example.com>") == f"{name} <{email}>"
    assert redactor.conceal("nothing of hers") == "nothing of hers"
    assert Redactor().conceal("ayse@example.com") == "ayse@example.com"


@pytest.mark.parametrize("stream", ["sentence", "buffer_all"])
async def test_an_answer_the_judge_finds_safe_is_sent_whole_with_its_own_end(session, peers, stream):
    peer = await peers()
    guard = ChunkGuard(_checker(session, peer, stream=stream))
    out = []
    for part in ("It stays ", "mild. ", "Rain on ", "Sunday."):
        out += await guard.arewrite(_chunk(part))
    out += await guard.arewrite(_chunk(None, "length"))
    assert _text(out) == "It stays mild. Rain on Sunday." and _finishes(out) == ["length"]


def _completion_chunk(text: str, finish: str | None = None) -> dict:
    return {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def test_a_completions_answer_is_read_by_the_output_rules_streamed_and_not():
    from llmgw.router.guarded import guard_answer

    effective = combine_policies([("p", Policy(mode="enforce", output=Rules(cards="block")))])
    whole = guard_answer(OutputChecker(effective, None), {"choices": [
        {"index": 0, "text": "Pay with 4111 1111 1111 1111 today.", "finish_reason": "stop"}]})
    assert whole["choices"][0] == {"index": 0, "text": "", "finish_reason": "content_filter"}
    guard = ChunkGuard(OutputChecker(effective, None))
    out = []
    for part in ("It is fine. ", "Pay with 4111 1111 ", "1111 1111 today."):
        out += guard.rewrite(_completion_chunk(part))
    out += guard.rewrite(_completion_chunk("", "stop"))
    # The words before the card went as they came; its digits were held until it was whole, then stopped.
    assert "".join(c["choices"][0]["text"] for c in out) == "It is fine. Pay with "
    assert [c["choices"][0]["finish_reason"] for c in out if c["choices"][0]["finish_reason"]] == ["content_filter"]
