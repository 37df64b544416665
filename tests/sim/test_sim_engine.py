"""`llmgw sim-engine` as a router sees it: a real process, spoken to with the openai SDK."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
import time

import aiohttp
import openai
import pytest

from tests.support.simengines import Sim

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards", "quietly",
         "hum", "old", "songs"]


def words(n: int) -> str:
    return "".join(" " + WORDS[i % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def sim():
    s = Sim().start()
    yield s
    s.stop()


@pytest.fixture
def sims():
    """Start sims with their own flags; every one is stopped after the test."""
    started: list[Sim] = []

    def start(*args: str) -> Sim:
        s = Sim(*args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def client(s: Sim, key: str = "none", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.base_url, api_key=key, max_retries=0, **kw)


def aclient(s: Sim, key: str = "none", **kw) -> openai.AsyncOpenAI:
    # Use it in `async with`: one left open is closed by the garbage collector
    # later, in another test, after this test's loop is gone, and logs there.
    return openai.AsyncOpenAI(base_url=s.base_url, api_key=key, max_retries=0, **kw)


USER = [{"role": "user", "content": "Say something."}]


def test_it_says_where_it_listens_in_one_line(sim):
    assert sim.line.startswith("sim-engine sim listening on http://127.0.0.1:")


def test_a_chat_answer_is_max_tokens_words_ending_for_length(sim):
    r = client(sim).chat.completions.create(model="sim", messages=USER, max_tokens=5)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == words(5)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (4, 5, 9)
    assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_without_max_tokens_it_answers_the_default_count_and_stops(sims):
    s = sims("--max-tokens-default", "7")
    r = client(s).chat.completions.create(model="sim", messages=USER)
    assert r.choices[0].message.content == words(7)
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 7


def test_max_completion_tokens_counts_as_max_tokens(sim):
    r = client(sim).chat.completions.create(model="sim", messages=USER, max_completion_tokens=2)
    assert r.choices[0].message.content == words(2)


def test_a_long_prompt_reports_half_of_it_cached_in_whole_16_token_blocks(sim):
    long = [{"role": "user", "content": "x" * 400}]  # 100 tokens: half is 50, in blocks 48
    r = client(sim).chat.completions.create(model="sim", messages=long, max_tokens=1)
    assert r.usage.prompt_tokens == 100
    assert r.usage.prompt_tokens_details.cached_tokens == 48


def test_a_streamed_chat_sends_one_token_an_event_role_first_then_finish_usage_and_done(sim):
    stream = client(sim).chat.completions.create(model="sim", messages=USER, max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True})
    chunks = list(stream)
    assert [c.object for c in chunks] == ["chat.completion.chunk"] * 6
    tokens = [c.choices[0].delta.content for c in chunks[:4]]
    assert "".join(tokens) == words(4) and len(tokens) == 4
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[4].choices[0].finish_reason == "length"
    assert chunks[5].choices == [] and chunks[5].usage.completion_tokens == 4
    assert len({c.id for c in chunks}) == 1


def test_a_stream_without_include_usage_has_no_usage_chunk(sim):
    chunks = list(client(sim).chat.completions.create(model="sim", messages=USER, max_tokens=2, stream=True))
    assert len(chunks) == 3 and all(c.choices for c in chunks)


async def test_a_stream_ends_with_done_on_the_wire(sim):
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.base_url}/chat/completions",
                             json={"messages": USER, "max_tokens": 2, "stream": True}) as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            body = await r.read()
    assert body.endswith(b"data: [DONE]\n\n")


def test_a_completion_answers_each_prompt_streamed_and_not(sim):
    c = client(sim)
    r = c.completions.create(model="sim", prompt=["one", "two"], max_tokens=3)
    assert r.object == "text_completion"
    assert [(ch.index, ch.text, ch.finish_reason) for ch in r.choices] == [(0, words(3), "length"),
                                                                           (1, words(3), "length")]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (2, 6)
    chunks = list(c.completions.create(model="sim", prompt="one", max_tokens=3, stream=True,
                                       stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == words(3)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 3


def test_a_completion_takes_token_ids_as_its_prompt(sim):
    r = client(sim).completions.create(model="sim", prompt=[1, 2, 3, 4, 5], max_tokens=1)
    assert r.usage.prompt_tokens == 5


def test_embeddings_are_the_same_unit_vector_for_the_same_text_in_either_encoding(sim):
    c = client(sim)
    floats = c.embeddings.create(model="sim", input=["alpha", "beta", "alpha"], encoding_format="float")
    a, b, again = (d.embedding for d in floats.data)
    assert len(a) == 64 and a == again and a != b
    assert math.isclose(math.sqrt(sum(x * x for x in a)), 1.0, rel_tol=1e-6)
    assert floats.usage.prompt_tokens == 5  # 2 + 1 + 2: about four characters a token
    # The SDK asks for base64 when not told otherwise, and decodes it itself.
    decoded = c.embeddings.create(model="sim", input="alpha")
    assert decoded.data[0].embedding == a
    raw = c.embeddings.with_raw_response.create(model="sim", input="alpha", encoding_format="base64")
    packed = base64.b64decode(raw.http_response.json()["data"][0]["embedding"])
    assert list(struct.unpack("<64f", packed)) == a


def test_models_lists_the_one_model_with_its_context_length(sims):
    s = sims("--model", "qwen-sim", "--context-length", "8192")
    models = client(s).models.list()
    assert [m.id for m in models.data] == ["qwen-sim"]
    assert models.data[0].model_extra["max_model_len"] == 8192


def test_a_tool_call_is_streamed_name_first_then_its_arguments_in_pieces(sim):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}]
    chunks = list(client(sim).chat.completions.create(model="sim", messages=USER, tools=tools, stream=True))
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert calls[0].id and calls[0].function.name == "get_weather"
    pieces = [c.function.arguments for c in calls[1:]]
    assert len(pieces) >= 2
    assert "".join(pieces) == '{"city":"x","days":1}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_tool_call_answers_whole_when_not_streamed_and_words_after_the_tools_result(sim):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    c = client(sim)
    r = c.chat.completions.create(model="sim", messages=USER, tools=tools)
    call = r.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments, r.choices[0].finish_reason) == ("lookup", "{}", "tool_calls")
    after = USER + [{"role": "assistant", "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    r = c.chat.completions.create(model="sim", messages=after, tools=tools, max_tokens=2)
    assert r.choices[0].message.content == words(2) and not r.choices[0].message.tool_calls
    r = c.chat.completions.create(model="sim", messages=USER, tools=tools, tool_choice="none", max_tokens=2)
    assert r.choices[0].message.content == words(2)


def test_thinking_sends_reasoning_content_before_the_content(sim):
    c = client(sim)
    r = c.chat.completions.create(model="sim", messages=USER, max_tokens=10,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    message = r.choices[0].message
    assert message.model_extra["reasoning_content"] == " let me think this"
    assert message.content == words(6)
    assert r.usage.completion_tokens == 10
    chunks = list(c.chat.completions.create(model="sim", messages=USER, max_tokens=10, stream=True,
                                            reasoning_effort="low"))
    kinds = ["reasoning" if (c.choices[0].delta.model_extra or {}).get("reasoning_content") else
             "content" if c.choices[0].delta.content else "end" for c in chunks]
    assert kinds == ["reasoning"] * 4 + ["content"] * 6 + ["end"]
    assert chunks[0].choices[0].delta.role == "assistant"


def test_a_request_without_a_started_key_gets_401_in_openais_shape(sims):
    s = sims("--api-key", "sk-one", "--api-key", "sk-two")
    with pytest.raises(openai.AuthenticationError) as refused:
        client(s, "sk-wrong").chat.completions.create(model="sim", messages=USER)
    assert refused.value.status_code == 401
    assert refused.value.body["code"] == "invalid_api_key"
    assert "sk-wrong" not in refused.value.message
    assert client(s, "sk-two").chat.completions.create(model="sim", messages=USER).choices


async def test_health_and_metrics_need_no_key(sims):
    s = sims("--api-key", "sk-one")
    async with aiohttp.ClientSession() as http:
        for path in ("/health", "/metrics"):
            async with http.get(s.url + path) as r:
                assert r.status == 200


def test_a_refused_key_gets_its_status_with_retry_after(sims):
    s = sims("--api-key", "sk-ok", "--refuse-key", "sk-busy=429", "--refuse-key", "sk-gone=403")
    with pytest.raises(openai.RateLimitError) as refused:
        client(s, "sk-busy").chat.completions.create(model="sim", messages=USER)
    assert refused.value.response.headers["Retry-After"] == "1"
    assert "error" in refused.value.response.json()
    with pytest.raises(openai.PermissionDeniedError):
        client(s, "sk-gone").chat.completions.create(model="sim", messages=USER)
    assert client(s, "sk-ok").chat.completions.create(model="sim", messages=USER).choices


def test_fail_status_answers_every_completion_with_that_code(sims):
    s = sims("--fail-status", "503")
    c = client(s)
    for call in (lambda: c.chat.completions.create(model="sim", messages=USER),
                 lambda: c.completions.create(model="sim", prompt="x"),
                 lambda: c.embeddings.create(model="sim", input="x")):
        with pytest.raises(openai.InternalServerError) as failed:
            call()
        assert failed.value.status_code == 503
        assert "--fail-status" in failed.value.message
    assert [m.id for m in c.models.list().data] == ["sim"]


def test_fail_on_answers_only_the_requests_whose_text_holds_the_word(sims):
    s = sims("--fail-on", "crash=500")
    c = client(s)
    poisoned = [{"role": "user", "content": [{"type": "text", "text": "please crash now"}]}]
    with pytest.raises(openai.InternalServerError) as failed:
        c.chat.completions.create(model="sim", messages=poisoned)
    assert failed.value.status_code == 500 and "--fail-on" in failed.value.message
    with pytest.raises(openai.InternalServerError):
        c.completions.create(model="sim", prompt=["fine", "crash"])
    assert c.chat.completions.create(model="sim", messages=USER).choices
    assert c.completions.create(model="sim", prompt="fine").choices


async def test_cut_after_ends_a_stream_after_n_tokens_without_done(sims):
    s = sims("--cut-after", "3")
    got = b""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{s.base_url}/chat/completions",
                             json={"messages": USER, "max_tokens": 10, "stream": True}) as r:
            with pytest.raises(aiohttp.ClientPayloadError):
                async for chunk in r.content.iter_any():
                    got += chunk
    assert got.count(b"data: ") == 3
    assert b"[DONE]" not in got and b"finish_reason\":\"" not in got
    with pytest.raises(openai.APIConnectionError):
        list(client(s).chat.completions.create(model="sim", messages=USER, max_tokens=10, stream=True))
    assert s.stop() == 0
    assert b"Traceback" not in s.err and b"Error" not in s.err


def test_cut_after_closes_a_longer_non_streamed_answer_and_lets_a_shorter_one_through(sims):
    s = sims("--cut-after", "3")
    with pytest.raises(openai.APIConnectionError):
        client(s).chat.completions.create(model="sim", messages=USER, max_tokens=10)
    r = client(s).chat.completions.create(model="sim", messages=USER, max_tokens=2)
    assert r.choices[0].message.content == words(2)


async def test_stall_after_sends_n_tokens_then_nothing_until_the_client_hangs_up(sims):
    s = sims("--stall-after", "3")
    got = b""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{s.base_url}/chat/completions",
                             json={"messages": USER, "max_tokens": 10, "stream": True}) as r:
            with pytest.raises(asyncio.TimeoutError):
                async with asyncio.timeout(1.0):
                    async for chunk in r.content.iter_any():
                        got += chunk
    assert got.count(b"data: ") == 3 and b"[DONE]" not in got
    # The answer it stalled is ended by the hang-up; a shorter one comes whole, and the engine stops cleanly.
    short = list(client(s).chat.completions.create(model="sim", messages=USER, max_tokens=3, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in short if c.choices) == words(3)
    assert s.stop() == 0
    assert b"Traceback" not in s.err


def test_hang_leaves_the_client_to_time_out_while_health_still_answers(sims):
    s = sims("--hang")
    with pytest.raises(openai.APITimeoutError):
        client(s, timeout=0.5).chat.completions.create(model="sim", messages=USER)
    assert [m.id for m in client(s).models.list().data] == ["sim"]


def test_sigterm_stops_a_hanging_engine_with_requests_still_held(sims):
    import socket

    s = sims("--hang")
    host, port = s.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as held:
        held.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Length: 2\r\n\r\n{}")
        time.sleep(0.2)
        assert s.stop() == 0
    assert b"Traceback" not in s.err


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            assert 'model_name="sim"' in line
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /metrics:\n{text}")


async def test_metrics_count_a_slow_stream_as_running_and_its_tokens_once_sent(sims):
    s = sims("--tokens-per-second", "20")
    async with aiohttp.ClientSession() as http:
        async def scrape() -> str:
            async with http.get(s.url + "/metrics") as r:
                return await r.text()

        before = await scrape()
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
                     "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            metric(before, name)
        assert metric(before, "vllm:num_requests_running") == 0
        async with http.post(f"{s.base_url}/chat/completions",
                             json={"messages": USER, "max_tokens": 10, "stream": True}) as r:
            await r.content.readline()
            during = await scrape()
            assert metric(during, "vllm:num_requests_running") == 1
            assert metric(during, "vllm:kv_cache_usage_perc") == 1 / 64
            await r.read()
        after = await scrape()
    assert metric(after, "vllm:num_requests_running") == 0
    assert metric(after, "vllm:prompt_tokens_total") == 4
    assert metric(after, "vllm:generation_tokens_total") == 10


async def test_a_client_that_hangs_up_stops_its_stream_without_noise(sims):
    s = sims("--tokens-per-second", "10")
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{s.base_url}/chat/completions",
                            json={"messages": USER, "max_tokens": 1000, "stream": True})
        await r.content.readline()
        r.close()
        for _ in range(50):
            async with http.get(s.url + "/metrics") as m:
                if metric(await m.text(), "vllm:num_requests_running") == 0:
                    break
            await asyncio.sleep(0.05)
        async with http.get(s.url + "/metrics") as m:
            text = await m.text()
    assert metric(text, "vllm:num_requests_running") == 0
    assert metric(text, "vllm:generation_tokens_total") < 1000
    assert s.stop() == 0
    assert b"Traceback" not in s.err and b"Error" not in s.err


async def test_a_paced_stream_takes_at_least_its_tokens_time(sims):
    s = sims("--tokens-per-second", "100")
    start = time.perf_counter()
    async with aclient(s) as c:
        chunks = [chunk async for chunk in await c.chat.completions.create(
            model="sim", messages=USER, max_tokens=10, stream=True)]
    took = time.perf_counter() - start
    assert len(chunks) == 11
    assert took >= 0.09  # token i leaves at i/100 s: the tenth at 0.09 s


async def test_streams_are_paced_each_on_its_own(sims):
    s = sims("--tokens-per-second", "50", "--ttft", "0.1")
    async with aclient(s) as c:
        async def one() -> float:
            start = time.perf_counter()
            await c.chat.completions.create(model="sim", messages=USER, max_tokens=6)
            return time.perf_counter() - start

        took = await asyncio.gather(*(one() for _ in range(8)))
    assert min(took) >= 0.2  # 0.1 s to the first token, five more at 50 a second


def test_bad_requests_get_400_and_an_unknown_model_404_in_vllms_words(sim):
    c = client(sim)
    with pytest.raises(openai.NotFoundError) as unknown:
        c.chat.completions.create(model="gpt-9", messages=USER)
    assert unknown.value.message.endswith("The model `gpt-9` does not exist.")
    with pytest.raises(openai.BadRequestError) as missing:
        c.chat.completions.create(model="sim", messages=[])
    assert "messages" in missing.value.message
    with pytest.raises(openai.BadRequestError) as too_long:
        c.chat.completions.create(model="sim", messages=USER, max_tokens=40000)
    assert "maximum context length is 32768 tokens" in too_long.value.message


async def test_malformed_json_gets_400_in_openais_shape(sim):
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.base_url}/chat/completions", data=b"{not json",
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400
            error = (await r.json())["error"]
    assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]


def test_sigterm_stops_it_cleanly(sims):
    s = sims()
    assert s.stop() == 0
    assert b"stopped" in s.err and b"Traceback" not in s.err


def test_a_taken_port_is_refused_with_a_sentence(sim):
    import subprocess
    import sys

    port = sim.url.rsplit(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", "llmgw", "sim-engine", "--port", port],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"the port {port} on 127.0.0.1 is taken by another process" in done.stderr


def test_a_bad_refuse_key_is_a_usage_error():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "llmgw", "sim-engine", "--refuse-key", "sk-a"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "expected KEY=STATUS" in done.stderr



def test_load_seconds_keeps_health_at_503_saying_it_is_loading(sims):
    # The turn to 200 once loaded is seen end to end in tests/console/test_overview.py (starting, then ready).
    import urllib.error
    import urllib.request

    s = sims("--load-seconds", "600")

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(s.url + "/health", timeout=5)

    assert e.value.code == 503 and b"still loading" in e.value.read()
    assert [m.id for m in client(s).models.list().data] == ["sim"]  # only /health waits


def test_a_prompt_that_names_one_of_the_tools_gets_a_call_to_that_tool_even_with_a_system_message_after_it(sim):
    tools = [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
        for name in ("Agent", "Read", "ReadMany")]
    # Claude Code 2.1 puts its environment in a system message after the user's.
    messages = [{"role": "user", "content": [{"type": "text", "text": "<reminder/>"},
                                             {"type": "text", "text": "Use the Read tool."}]},
                {"role": "system", "content": "Working directory: /src"}]
    r = client(sim).chat.completions.create(model="sim", messages=messages, tools=tools)
    (call,) = r.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("Read", '{"path":"x"}')
    named_none = client(sim).chat.completions.create(model="sim", messages=USER, tools=tools)
    assert named_none.choices[0].message.tool_calls[0].function.name == "Agent"


def test_with_a_tokenizer_a_prompt_that_starts_as_an_earlier_one_finds_its_blocks_cached(sims, tmp_path):
    from tests.fixtures.tinyllama import write_tiny_llama

    write_tiny_llama(tmp_path)
    s = sims("--tokenizer", str(tmp_path), "--block-size", "16", "--cache-blocks", "64")
    system = " ".join(["The sun is shining and the sky is blue."] * 10)
    first, again, other = (client(s).chat.completions.create(model="sim", max_tokens=2, messages=[
        {"role": "system", "content": prompt}, {"role": "user", "content": question}]).usage
        for prompt, question in ((system, "Hello"), (system, "How are you?"), ("Another beginning.", "Hello")))
    assert first.prompt_tokens_details.cached_tokens == 0
    # The system prompt's whole blocks are found again; the question, after them, is not.
    assert 0 < again.prompt_tokens_details.cached_tokens < again.prompt_tokens
    assert again.prompt_tokens_details.cached_tokens % 16 == 0
    assert other.prompt_tokens_details.cached_tokens == 0
    metrics = {line.split("{")[0]: float(line.split()[-1]) for line in
               page_text(s.base_url.rsplit("/v1", 1)[0] + "/metrics").splitlines()
               if line.startswith("vllm:prefix_cache")}
    assert metrics["vllm:prefix_cache_hits_total"] == again.prompt_tokens_details.cached_tokens
    assert metrics["vllm:prefix_cache_queries_total"] == first.prompt_tokens + again.prompt_tokens + other.prompt_tokens


def page_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()
