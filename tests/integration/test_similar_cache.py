"""Similar questions answered from the cache, through a real llmgw server, the openai SDK and real engines.

Two real `llmgw sim-engine`s on loopback: `desk`, the chat model, and
`minilm`, all-MiniLM-L6-v2 behind /v1/embeddings, both in the catalog, with
`router.cache.embedding_model: minilm`. The project's cache is turned on
with `llmgw keys cache --similar 0.78`, the threshold measured for MiniLM
(docs/cache.md, "Choosing the threshold").
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter

import openai
import pytest

from tests.support.rewordings import REWORDINGS
from tests.support.servers import Server, SimEngine, usage_rows, write_config
from tests.support.waiting import wait_for, wait_until

PROJECT = "Default/default/default"
THRESHOLD = "0.78"
ANSWER_TOKENS = 8
SYSTEM = {"role": "system", "content": "You are Acme's help desk. Answer in two sentences."}
EARLIER = [{"role": "user", "content": "Hello, I have a problem with my account."},
           {"role": "assistant", "content": "Sorry to hear that. What is the problem?"}]


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    """The chat engine and the embedding engine, for the module: loading MiniLM takes seconds."""
    root = tmp_path_factory.mktemp("sims")
    chat = SimEngine(root, "desk").start()
    try:
        embedder = SimEngine(root, "minilm", "--embedding-model", "all-MiniLM-L6-v2").start(timeout=180)
    except BaseException:
        chat.stop()
        raise
    yield chat, embedder
    embedder.stop()
    chat.stop()


@pytest.fixture
def gateway(tmp_path, sims):
    chat, embedder = sims
    config = write_config(tmp_path / "gw.yaml", {
        "models": [{"name": "desk", "endpoints": [chat.url]}, {"name": "minilm", "endpoints": [embedder.url]}],
        # A budget no load reaches: past the 2 s default, a busy two-core machine turned a rewording into an
        # exact lookup, as the gateway should, and the count of similar hits then said the machine's load.
        "router": {"cache": {"embedding_model": "minilm", "embedding_budget": "60s", "read_every": "100ms"}}})
    server = Server(tmp_path, "gw", config=config)
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    server.start()
    try:
        cache = server.ctl_json("keys", "cache", "--project", PROJECT, "--ttl", "1h", "--similar", THRESHOLD)
        assert cache["cache"]["similar"] == float(THRESHOLD)
        wait_until(lambda: server.metric("llmgw_cache_projects") == 1, timeout=15,
                   what="the gateway read the project's cache setting (llmgw_cache_projects 1)")
        yield server
    finally:
        server.stop()


def ask(client: openai.OpenAI, wording: str, system: dict = SYSTEM, **extra):
    return client.chat.completions.with_raw_response.create(
        model="desk", messages=[system, *EARLIER, {"role": "user", "content": wording}],
        temperature=0, max_tokens=ANSWER_TOKENS, **extra)


def generated(engine: SimEngine) -> float:
    """The tokens the engine has generated: ANSWER_TOKENS for each chat it answered."""
    line = next(x for x in engine.metrics().splitlines() if x.startswith("vllm:generation_tokens_total"))
    return float(line.rsplit(" ", 1)[1])


def cache_metrics(server: Server) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {line.split()[0][len("llmgw_cache_"):]: float(line.split()[1])
            for line in text.splitlines() if line.startswith("llmgw_cache_")}


def test_forty_rewordings_in_one_conversation_cost_one_engine_call_and_39_similar_hits(gateway, sims):
    chat, _ = sims
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    before = generated(chat)
    said, similarities, answers = [], [], set()
    for wording in REWORDINGS:
        raw = ask(client, wording)
        said.append(raw.headers.get("x-llmgw-cache"))
        if "x-llmgw-cache-similarity" in raw.headers:
            similarities.append(float(raw.headers["x-llmgw-cache-similarity"]))
            assert int(raw.headers["Age"]) >= 0
        answers.add(raw.parse().choices[0].message.content)
    assert said == [None] + ["similar"] * 39
    assert len(similarities) == 39 and min(similarities) >= float(THRESHOLD)
    assert len(answers) == 1  # every rewording got the first wording's answer
    assert generated(chat) - before == ANSWER_TOKENS  # one engine call

    rows = usage_rows(gateway, 40)
    assert Counter(r["cache"] for r in rows) == {None: 1, "similar": 39}
    hits = [r for r in rows if r["cache"] == "similar"]
    assert all(r["status"] == 200 and r["model"] == "desk" for r in hits)
    assert all(r["prompt_tokens"] == r["completion_tokens"] == r["cost_micros"] == 0 for r in hits)
    assert all(r["detail"]["similarity"] >= float(THRESHOLD) for r in hits)

    # The same wording in another conversation (another system prompt) is another question.
    other = ask(client, REWORDINGS[1], system={"role": "system", "content": "You are a pirate. Answer in rhyme."})
    assert "x-llmgw-cache" not in other.headers
    assert generated(chat) - before == 2 * ANSWER_TOKENS

    # A streamed ask of a rewording is answered from the cache as a stream.
    streamed = ask(client, REWORDINGS[7], stream=True, stream_options={"include_usage": True})
    assert streamed.headers["x-llmgw-cache"] == "similar"
    assert float(streamed.headers["x-llmgw-cache-similarity"]) >= float(THRESHOLD)
    chunks = list(streamed.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answers.pop()
    assert chunks[-1].usage is not None  # include_usage asked for it
    assert generated(chat) - before == 2 * ANSWER_TOKENS

    counted = cache_metrics(gateway)
    assert counted["similar_hits"] == 40 and counted["misses"] == 2 and counted["hits"] == 0
    assert counted["entries"] == 2


def test_a_key_that_may_not_use_the_embedding_model_gets_only_the_very_same_answer(gateway, sims):
    chat, _ = sims
    made = gateway.ctl_json("keys", "create", "desk-only", "--project", PROJECT, "--create")
    assert gateway.ctl("keys", "limits", "--scope", "key", "--id", made["id"],
                       "--models", "desk").returncode == 0
    client = openai.OpenAI(api_key=made["key"], base_url=gateway.client_url + "/v1", max_retries=0)

    def refused_embedding() -> bool:
        try:
            client.embeddings.create(model="minilm", input="x")
        except openai.PermissionDeniedError:
            return True
        return False

    assert wait_for(refused_embedding, timeout=15, interval=0.5)[0]  # the key's limits have reached the router
    before = generated(chat)
    assert "x-llmgw-cache" not in ask(client, REWORDINGS[0]).headers
    assert "x-llmgw-cache" not in ask(client, REWORDINGS[1]).headers  # the gateway does not embed for it
    assert ask(client, REWORDINGS[1]).headers["x-llmgw-cache"] == "hit"
    assert generated(chat) - before == 2 * ANSWER_TOKENS
