"""Streamed answers under the baseline policy, from a real server and a sim-engine writing a token at a time.

Under the baseline the chat bubble stayed empty until a sentence ended (or
the answer did): the output rules released answers a sentence at a time
(issue 25, item 11). Now only what may still become a value is held.
"""

from __future__ import annotations

import json

import openai

from llmgw.guard.policy import baseline_policy
from tests.support.servers import write_config


def _cluster(servers, engines, tmp_path, *flags: str, guard: dict | None = None):
    engine = engines("qwen", *flags)
    doc: dict = {"models": [{"name": "qwen", "endpoints": [engine.url]}]}
    if guard is not None:
        doc["guard"] = guard
    server = servers("gw", config=write_config(tmp_path / "server.yaml", doc))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    return openai.OpenAI(api_key=json.loads(done.stdout)["key"]["key"], base_url=server.client_url + "/v1",
                         max_retries=0)


def _pieces(client, content: str, **extra) -> list[str]:
    """The content of each event of a streamed answer, as the client receives them, empty ones left out."""
    stream = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": content}],
                                            stream=True, **extra)
    return [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]


def test_under_the_baseline_a_streamed_answer_arrives_word_by_word_before_its_sentence_ends(servers, engines,
                                                                                           tmp_path):
    # The sim's answer ("the quick brown fox …") has no full stop at all: sentence by sentence, it came
    # whole in its last event.
    client = _cluster(servers, engines, tmp_path, "--tokens-per-second", "100")

    pieces = _pieces(client, "tell me something", max_tokens=12)

    assert "".join(pieces) == " the quick brown fox jumps over a lazy dog while seven wizards"
    assert pieces[:3] == [" the", " quick", " brown"]
    assert len(pieces) >= 11


def test_under_the_baseline_a_redacted_address_is_put_back_into_a_streamed_answer(servers, engines, tmp_path):
    guard = {"default": ["baseline", "privacy"], "policies": {
        "baseline": baseline_policy(),
        "privacy": {"input": {"pii": {"email": "redact"}, "restore": True}}}}
    client = _cluster(servers, engines, tmp_path, "--echo", guard=guard)

    pieces = _pieces(client, "write to ayse@example.com and to [EMAIL_7] today")

    assert "".join(pieces).strip() == "write to ayse@example.com and to [EMAIL_7] today"
    assert len(pieces) > 1
