"""What the fuzz of issue 10 sent, sent again on purpose: each is refused with a 4xx in the endpoint's own shape.

One real `llmgw server` (router.max_body 64KB, router.max_n 4) in front of a
real sim-engine, shared by the module's tests: none of them changes it.
"""

from __future__ import annotations

import gzip
import json
import socket
import zlib

import pytest

from tests.support.servers import Server, SimEngine, write_config

MAX_BODY = 64 * 1024
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 3}
MESSAGE = {"model": "sim", "max_tokens": 3, "messages": [{"role": "user", "content": "Say something."}]}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    engine = SimEngine(root, "sim").start()
    config = write_config(root / "server.yaml", {"models": [{"name": "sim", "endpoints": [engine.url]}],
                                                 "router": {"max_body": "64KB", "max_n": 4}})
    server = Server(root, "gw", config=config)
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    server.start()
    yield server
    server.stop()
    engine.stop()
    assert "Traceback" not in server.output()


def send(server, path: str, body: bytes, headers: dict[str, str] | None = None,
         length: int | None = None) -> tuple[int, dict]:
    """POST `body` as it is, with the Content-Length given (or its own): what a client that writes bytes sends."""
    head = [f"POST {path} HTTP/1.1", f"Host: {server.client_url[7:]}", f"Authorization: Bearer {server.key}",
            "Content-Type: application/json", "Connection: close",
            f"Content-Length: {len(body) if length is None else length}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", server.ports["client"]), timeout=30) as sock:
        sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(payload)


def openai_code(doc: dict) -> str:
    return doc["error"]["code"]


def test_a_gzip_body_is_read_whole_and_answered(gw):
    status, doc = send(gw, "/v1/chat/completions", gzip.compress(json.dumps(CHAT).encode()),
                       {"Content-Encoding": "gzip"})
    assert status == 200
    assert doc["choices"][0]["message"]["content"] == " the quick brown"


def test_a_deflate_body_zlib_wrapped_or_raw_is_answered(gw):
    raw = zlib.compressobj(wbits=-15)
    for body in (zlib.compress(json.dumps(CHAT).encode()),
                 raw.compress(json.dumps(CHAT).encode()) + raw.flush()):
        status, doc = send(gw, "/v1/chat/completions", body, {"Content-Encoding": "deflate"})
        assert status == 200, doc


def test_a_body_that_says_gzip_but_is_not_gets_400_in_each_endpoints_shape(gw):
    status, doc = send(gw, "/v1/chat/completions", json.dumps(CHAT).encode(), {"Content-Encoding": "gzip"})
    assert status == 400
    assert openai_code(doc) == "invalid_encoding"
    assert "not valid gzip" in doc["error"]["message"]
    status, doc = send(gw, "/v1/messages", json.dumps(MESSAGE).encode(), {"Content-Encoding": "gzip"})
    assert status == 400
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"  # Anthropic's shape
    assert "not valid gzip" in doc["error"]["message"]


def test_a_gzip_body_cut_short_is_refused_saying_so(gw):
    packed = gzip.compress(json.dumps(CHAT).encode())
    status, doc = send(gw, "/v1/chat/completions", packed[:len(packed) // 2], {"Content-Encoding": "gzip"})
    assert status == 400
    assert "inflated from gzip, is not valid JSON" in doc["error"]["message"]
    assert "is the gzip data whole?" in doc["error"]["message"]


def test_a_gzip_bomb_is_refused_with_413_once_it_inflates_past_max_body(gw):
    bomb = gzip.compress(b'{"model": "' + b" " * (MAX_BODY * 64) + b'"}')
    assert len(bomb) < MAX_BODY
    status, doc = send(gw, "/v1/chat/completions", bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    assert openai_code(doc) == "request_too_large"
    assert "inflates to more than the 0.0625 MB" in doc["error"]["message"]


def test_an_encoding_the_gateway_does_not_inflate_is_refused_with_415_naming_what_it_takes(gw):
    body = gzip.compress(gzip.compress(json.dumps(CHAT).encode()))
    status, doc = send(gw, "/v1/chat/completions", body, {"Content-Encoding": "gzip, gzip"})
    assert status == 415
    assert openai_code(doc) == "unsupported_encoding"
    assert "gzip or deflate" in doc["error"]["message"]


def test_an_empty_body_is_said_to_be_empty(gw):
    status, doc = send(gw, "/v1/chat/completions", b"", length=0)
    assert status == 400
    assert doc["error"]["message"] == "the request body is empty; send the request as a JSON object"


def test_a_body_nested_deeper_than_128_levels_is_refused_with_400_not_500(gw):
    # 300 levels: orjson reads it, but could not write it again for the engine.
    body = dict(CHAT, stop=json.loads("[" * 300 + "]" * 300))
    status, doc = send(gw, "/v1/chat/completions", json.dumps(body).encode())
    assert status == 400
    assert "nested more than 128 levels" in doc["error"]["message"]


@pytest.mark.parametrize("effort", [["low"], {"level": "high"}, 3])
def test_reasoning_effort_that_is_not_a_word_is_refused_with_400(gw, effort):
    body = {"model": "sim", "input": "Say something.", "reasoning": {"effort": effort}}
    status, doc = send(gw, "/v1/responses", json.dumps(body).encode())
    assert status == 400
    assert doc["error"]["param"] == "reasoning.effort"
    assert "reasoning.effort must be none, minimal, low, medium, high or xhigh" in doc["error"]["message"]


def test_n_and_best_of_above_max_n_are_refused_naming_the_setting(gw):
    status, doc = send(gw, "/v1/chat/completions", json.dumps(dict(CHAT, n=1000)).encode())
    assert status == 400
    assert openai_code(doc) == "too_many_choices" and doc["error"]["param"] == "n"
    assert "router.max_n" in doc["error"]["message"] and "ask for 4 or fewer" in doc["error"]["message"]
    completion = {"model": "sim", "prompt": "Once", "max_tokens": 3, "best_of": 1000}
    status, doc = send(gw, "/v1/completions", json.dumps(completion).encode())
    assert status == 400
    assert doc["error"]["param"] == "best_of" and "router.max_n" in doc["error"]["message"]
    status, doc = send(gw, "/v1/chat/completions", json.dumps(dict(CHAT, n="many")).encode())
    assert status == 400 and doc["error"]["param"] == "n"
    status, _ = send(gw, "/v1/chat/completions", json.dumps(dict(CHAT, n=4)).encode())
    assert status == 200


def test_a_tool_schema_whose_types_are_not_words_is_answered_with_a_call_not_500(gw):
    # The sim once failed with 500 here, which the gateway relayed (issue 10, item 12).
    schema = {"type": "object", "required": ["a", "b", "c", "d"],
              "properties": {"a": {"type": {"nested": "object"}}, "b": {"type": [["string"], None]},
                             "c": {"type": 7}, "d": {"enum": [json.loads("[" * 100 + "]" * 100)]}}}
    body = dict(CHAT, tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])
    status, doc = send(gw, "/v1/chat/completions", json.dumps(body).encode())
    assert status == 200, doc
    call = doc["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "f"
    assert json.loads(call["arguments"]) == {"a": "x", "b": None, "c": "x", "d": json.loads("[" * 100 + "]" * 100)}


def test_messages_refused_before_its_handler_still_answers_in_anthropics_shape(gw):
    # The key check runs for every route alike; the Anthropic SDK reads only its own shape.
    head = (f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(json.dumps(MESSAGE))}\r\n\r\n").encode() + json.dumps(MESSAGE).encode()
    with socket.create_connection(("127.0.0.1", gw.ports["client"]), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 401")
    doc = json.loads(data.partition(b"\r\n\r\n")[2])
    assert doc["type"] == "error" and doc["error"]["type"] == "authentication_error"
    assert doc["error"]["message"].startswith("no API key")
    status, doc = send(gw, "/v1/messages", json.dumps(MESSAGE).encode(), {"Content-Encoding": "compress"})
    assert status == 415 and doc["type"] == "error"


def test_the_admin_api_refuses_a_body_that_says_gzip_but_is_not_with_400(gw):
    from llmgw.control.token import read_token

    head = (f"POST /api/v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {read_token(gw.token_file)}\r\n"
            "Content-Type: application/json\r\nContent-Encoding: gzip\r\nConnection: close\r\n"
            "Content-Length: 7\r\n\r\ngarbage").encode()
    with socket.create_connection(("127.0.0.1", gw.ports["admin"]), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400")
    assert "does not inflate" in json.loads(data.partition(b"\r\n\r\n")[2])["error"]["message"]
