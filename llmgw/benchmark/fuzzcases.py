"""What the fuzzer sends: valid requests to every route, each broken in one of the ways clients break them.

Every case is a pure function of (seed, index), so a failure printed with
its seed and index is sent again, byte for byte, by `cases(seed, [index])`.
The seeds are requests a real client would send (each field the gateway
reads is present), and the breakage is one of: a wrong type, an odd value
or a missing key at one JSON path; a body that is not JSON, nested past
any parser's depth, or numbers past 64 bits; a compressed body that is
good, bad or a bomb; headers and methods no client should send; bytes
aiohttp's own client would never write (a Content-Length that lies, a
header line of 16 KB). Issue 10 names these as what was found to give 500s.
"""

from __future__ import annotations

import gzip
import random
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import orjson

MODEL = "sim"
PNG = "data:image/png;base64,iVBORw0KGgo="
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]},
                                           "unit": {"enum": ["c", "f"]}},
          "required": ["city", "days", "unit"]}

CHAT = {
    "model": MODEL, "max_tokens": 8, "temperature": 0.5, "top_p": 1, "n": 1, "stop": ["\n\n"], "user": "fuzz",
    "seed": 7, "presence_penalty": 0, "logprobs": False, "stream": False,
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is the weather"},
                                     {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}}],
         "name": "alice"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                                "parameters": SCHEMA}}],
    "tool_choice": "auto", "response_format": {"type": "json_object"},
}
COMPLETIONS = {"model": MODEL, "prompt": ["Once upon", "a time"], "suffix": "The end.", "max_tokens": 8, "n": 1,
               "best_of": 1, "echo": False, "temperature": 0.2, "stream": False}
EMBEDDINGS = {"model": MODEL, "input": ["a cat", "a dog"], "encoding_format": "float", "dimensions": 16}
RESPONSES = {
    "model": MODEL, "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0.2, "stream": False,
    "input": [
        {"type": "message", "role": "developer", "content": "Answer in English."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                                        {"type": "input_image", "image_url": PNG}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "rain"}]},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{"type": "function", "name": "weather", "description": "The weather.", "parameters": SCHEMA,
               "strict": True}],
    "tool_choice": {"type": "function", "name": "weather"}, "reasoning": {"effort": "low"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": SCHEMA, "strict": True}},
}
MESSAGES = {
    "model": MODEL, "max_tokens": 8, "temperature": 0.5, "stop_sequences": ["END"], "stream": False,
    "system": [{"type": "text", "text": "Be brief."}], "metadata": {"user_id": "fuzz"},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": "iVBORw0KGgo="}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "t1", "name": "weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "rain"}]}]},
    ],
    "tools": [{"name": "weather", "description": "The weather.", "input_schema": SCHEMA}],
    "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
}
# Knowledge bases (docs/knowledge.md): named on a chat and as a file_search tool, and made. The ids
# name no base of the fuzzer's, so a mutation that keeps them valid is a 404, never another project's base.
NO_BASE = "vs_" + "F" * 24
KNOWLEDGE_CHAT = {**CHAT, "knowledge_bases": [NO_BASE], "knowledge_max_results": 4}
FILE_SEARCH = {**RESPONSES, "tools": [{"type": "file_search", "vector_store_ids": [NO_BASE], "max_num_results": 3}],
               "include": ["file_search_call.results"]}
VECTOR_STORE = {"name": "fuzz", "embedding_model": MODEL, "metadata": {"team": "fuzz"},
                "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                                   "chunk_overlap_tokens": 20}}}
CLIENT_ROUTES = [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETIONS), ("/v1/embeddings", EMBEDDINGS),
                 ("/v1/responses", RESPONSES), ("/v1/messages", MESSAGES),
                 ("/v1/chat/completions", KNOWLEDGE_CHAT), ("/v1/responses", FILE_SEARCH),
                 ("/v1/vector_stores", VECTOR_STORE)]

# Admin routes as (method, path, body). Bodies touch only what the fuzzer
# makes up (a project, a model, a key id that do not exist), so a mutation
# that happens to be valid cannot revoke the fuzzer's own key or stop its model.
ADMIN_ROUTES = [
    ("GET", "/api/v1/status", None), ("GET", "/api/v1/config?path=router.retries", None),
    ("POST", "/api/v1/config", {"set": {"router.retries": "2"}}),
    ("GET", "/api/v1/audit?limit=5&since=0", None), ("GET", "/api/v1/keys?project=fuzz", None),
    ("POST", "/api/v1/keys", {"name": "fuzz", "project": "fuzz-project", "ttl": "1h", "band": "batch"}),
    ("GET", "/api/v1/keys/k-nope", None), ("POST", "/api/v1/keys/k-nope/revoke", None),
    ("GET", "/api/v1/limits?scope=project&id=fuzz-project", None),
    ("PUT", "/api/v1/limits", {"scope": "project", "id": "fuzz-project",
                               "limits": {"rpm": 10, "tpm": 1000, "budget": "5.00", "period": "month",
                                          "models": ["nope"], "expires": "1h"}}),
    # Usage from 2100 on: the whole day's rows, 30,000 of them by the end of
    # a run, made each export cost 100 ms and the run twice as long.
    ("GET", "/api/v1/usage?since=4102444800&by=model", None),
    ("GET", "/api/v1/usage/export?format=csv&since=4102444800", None),
    ("GET", "/api/v1/requests/r-nope", None), ("GET", "/api/v1/cache?project=fuzz-project", None),
    ("PUT", "/api/v1/cache?project=fuzz-project", {"on": True, "ttl": "1h", "similar": False}),
    ("POST", "/api/v1/nodes/join-codes", {"name": "fuzz-node", "ttl": "10m", "control_planes": ["127.0.0.1:1"]}),
    ("GET", "/api/v1/models", None), ("GET", "/api/v1/models/nope", None),
    ("POST", "/api/v1/models", {"spec": {"name": "fuzz-model", "source": "hf:org/nope", "engine": "llamacpp"}}),
    ("POST", "/api/v1/models/serve", {"source": "hf:org/nope", "name": "fuzz-served", "gpus": 1, "context": 4096,
                                      "slots": 2, "memory": "4GB", "cores": 2, "sha256": "00"}),
    ("DELETE", "/api/v1/models/nope", None), ("POST", "/api/v1/models/nope/stop", None),
    ("POST", "/api/v1/models/nope/scale", {"count": 2, "profile": "batch", "in_place": True}),
    ("POST", "/api/v1/models/nope/context", {"context": 8192}),
    ("GET", "/api/v1/models/nope/placement", None), ("GET", "/api/v1/nodes", None),
    ("GET", "/api/v1/nodes/nope", None), ("GET", "/api/v1/nodes/nope/logs?lines=10&source=engine", None),
    ("GET", "/api/v1/replicas?model=nope", None),
]

# Values that are the wrong type, the wrong size or the wrong text almost
# anywhere. Strings starting with RAW are written into the body as they are,
# for what a JSON encoder would never produce.
RAW = "\x00raw:"
HOSTILE: list[object] = [
    None, True, False, 0, -1, 1, 2 ** 63 - 1, -2 ** 63, 0.5, -0.0, 1e308, "", " ", "none", "null", "0",
    "x" * 5000, "\u202e\u0000\ufeff", "😀" * 50, "İı\u0301ß", "\\", "{{template}}", "<script>", "../../etc/passwd",
    [], {}, [None], [[]], [{}], {"type": None}, {"type": []}, {"type": {}}, {"type": "text"}, {"text": 5},
    ["a", 1, None, {}], [1, 2, 3], {"": ""}, {"a": {"b": {"c": [1]}}},
    RAW + "123456789012345678901234567890", RAW + "-1e999", RAW + "1e999", RAW + "NaN", RAW + "Infinity",
    RAW + "1.5e-400", RAW + '"\\ud800"', RAW + '"\\u0000"', RAW + "[" * 300 + "]" * 300,
]
METHODS = ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST", "TRACE", "FUZZ"]
ODD_PATHS = ["/v1", "/v1/", "/v1/chat", "/v1/chat/completions/x", "//v1//models", "/v1/models/sim",
             "/v1/%00", "/v1/..%2f..%2fapi/v1/status", "/v1/" + "a" * 4000, "/v1/models?limit=-1&x=%ff",
             "/v1/chat/completions?stream=true", "/health?x=1", "/ready", "/leader", "/nope", "/v1/embeddings/"]


@dataclass
class Case:
    target: str  # "client" or "admin"
    method: str
    path: str
    kind: str  # what was done to it, for the report
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    raw: bytes | None = None  # the whole request as bytes, sent on a socket of its own
    key: str = "valid"  # which credential: valid, none, unknown, malformed, admin, wrong-admin
    half_close: bool = False  # end the sending side after the request: a body that stops short

    def describe(self) -> str:
        shown = (self.raw if self.raw is not None else self.body or b"")[:300]
        return f"{self.method} {self.path[:120]} [{self.kind}; key {self.key}] {shown!r}"


def _copy(doc):
    """A deep copy, through orjson: several times faster than copy.deepcopy, and the cases are JSON anyway."""
    return orjson.loads(orjson.dumps(doc))


def _paths(doc, at=()):
    """Every JSON path in `doc`, the root included."""
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, at + (i,))


def _set(doc, path, value):
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


def mutate(doc, rng: random.Random) -> tuple[object, str]:
    """One breakage at one path: (the new document, what was done where)."""
    doc = _copy(doc)
    paths = list(_paths(doc))
    path = rng.choice(paths)
    where = ".".join(map(str, path)) or "(root)"
    op = rng.random()
    if op < 0.62:
        value = rng.choice(HOSTILE)
        return _set(doc, path, _copy(value)), f"{where}={str(value)[:40]!r}"
    if op < 0.72 and path:
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
        return doc, f"{where} removed"
    target = doc
    for step in path:
        target = target[step]
    if op < 0.8 and isinstance(target, dict):
        target[rng.choice(["zz_unknown", "type", "text", "content", "role", "name", "__proto__"])] = \
            _copy(rng.choice(HOSTILE))
        return doc, f"{where} gained a key"
    if op < 0.9:
        return _set(doc, path, [target] * rng.choice([2, 50, 2000])), f"{where} repeated"
    return _set(doc, path, {"type": target, "text": target}), f"{where} wrapped"


def dumps(doc) -> bytes:
    """JSON, with RAW strings written in as the bytes they carry."""
    return _RAW_STRING.sub(lambda m: orjson.loads(m.group(0))[len(RAW):].encode(), orjson.dumps(doc))


# A JSON string that starts with RAW, as orjson writes it: escapes included.
_RAW_STRING = re.compile(rb'"' + re.escape(orjson.dumps(RAW)[1:-1]) + rb'(?:[^"\\]|\\.)*"')


@lru_cache(maxsize=1)
def gzip_bomb(inflated: int) -> bytes:
    """A few tens of KB of gzip that inflate to `inflated` bytes: a JSON string of spaces."""
    return gzip.compress(b'{"model": "' + b" " * inflated + b'"}', compresslevel=9, mtime=0)


WHOLE_BODIES = [
    b"", b"null", b"[]", b"1", b'"text"', b"{", b'{"model": "sim"', b"{}", b'{"model": "sim"} trailing',
    b"\xef\xbb\xbf{}", b'{"model": "\xff\xfe"}', b'{"model": "sim", "model": []}', b" " * 100_000,
    b"[" * 100_000, b'{"a":' * 3000 + b"1" + b"}" * 3000, b"\x00" * 64, b"\x1f\x8b\x08\x00garbage",
    b'{"model": 1e999999}', b'{"model": "sim", "messages": [' + b"{}," * 50_000 + b"{}]}",
]


def _encoded(body: bytes, rng: random.Random, max_body: int) -> tuple[bytes, dict[str, str], str]:
    choice = rng.randrange(10)
    if choice == 0:
        return gzip.compress(body, mtime=0), {"Content-Encoding": "gzip"}, "gzip"
    if choice == 1:
        return zlib.compress(body), {"Content-Encoding": "deflate"}, "deflate"
    if choice == 2:
        raw = zlib.compressobj(wbits=-15)
        return raw.compress(body) + raw.flush(), {"Content-Encoding": "deflate"}, "raw deflate"
    if choice == 3:
        return body, {"Content-Encoding": "gzip"}, "gzip header, plain body"
    if choice == 4:
        packed = gzip.compress(body, mtime=0)
        return packed[:max(1, len(packed) // 2)], {"Content-Encoding": "gzip"}, "gzip cut in half"
    if choice == 5:
        return gzip_bomb(max_body + 1024), {"Content-Encoding": "gzip"}, "gzip bomb"
    if choice == 6:
        return gzip.compress(gzip.compress(body, mtime=0), mtime=0), {"Content-Encoding": "gzip, gzip"}, "gzip twice"
    if choice == 7:
        return body, {"Content-Encoding": rng.choice(["br", "zstd", "x-gzip", "compress", "GZIP", "identity",
                                                      "", "gzip;q=1", "\t"])}, "odd encoding"
    if choice == 8:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))), \
            {"Content-Encoding": "deflate"}, "random bytes as deflate"
    packed = gzip.compress(body, compresslevel=1, mtime=0)
    return packed + b"trailing", {"Content-Encoding": "gzip"}, "gzip with trailer"


ODD_HEADERS = [
    {"Content-Type": "text/plain"}, {"Content-Type": "multipart/form-data; boundary=x"}, {"Content-Type": ""},
    {"x-llmgw-profile": "nope"}, {"x-llmgw-profile": "batch"}, {"x-llmgw-profile": "x" * 3000},
    {"X-Forwarded-For": "not an address, 999.1.1.1, ::1"}, {"X-Forwarded-For": ", , ,"},
    {"x-request-id": "\u00e9" * 10}, {"Accept": "text/event-stream"}, {"Accept-Encoding": "br"},
    {"Connection": "close"}, {"Expect": "100-continue"}, {"X-Llmgw-Actor": "root"}, {"session_id": "s" * 500},
    {"anthropic-version": "1999-01-01"}, {"anthropic-beta": "\u0000"},
]


def _credential(key: str, rng: random.Random) -> tuple[str, dict[str, str]]:
    roll = rng.random()
    if roll < 0.9:
        return "valid", {"Authorization": f"Bearer {key}"}
    if roll < 0.94:
        return "valid", {"x-api-key": key}
    return rng.choice([
        ("none", {}), ("malformed", {"Authorization": "Bearer"}),
        ("malformed", {"Authorization": "Basic Zm9vOmJhcg=="}),
        ("malformed", {"Authorization": "Bearer " + "\u00ff" * 20}),
        ("unknown", {"Authorization": "Bearer " + key[:-6] + "AAAAAA"}),
        ("valid", {"Authorization": f"bearer   {key}  "}),
    ])


def _raw_request(path: str, key: str, body: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A request aiohttp's client would refuse to write, as the bytes on the wire."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n" \
           "Content-Type: application/json\r\nConnection: close\r\n".encode()
    kind = rng.randrange(9)
    if kind == 0:
        return head + b"Content-Length: 0\r\n\r\n", "Content-Length: 0"
    if kind == 1:
        return head + f"Content-Length: {len(body) + 100}\r\n\r\n".encode() + body, \
            "body shorter than its Content-Length"
    if kind == 2:
        return head + b"Content-Length: abc\r\n\r\n" + body, "Content-Length not a number"
    if kind == 3:
        return head + f"Content-Length: {len(body)}\r\nContent-Length: 3\r\n\r\n".encode() + body, \
            "two Content-Lengths"
    if kind == 4:
        return head + b"X-Long: " + b"a" * 16_000 + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body, \
            "a 16 KB header line"
    if kind == 5:
        return head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n", "a bad chunk size"
    if kind == 6:
        return head + f"Transfer-Encoding: chunked\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body, \
            "chunked and a Content-Length"
    if kind == 7:
        return b"POST " + path.encode() + b" HTTP/1.0\r\n\r\n", "HTTP/1.0, no headers"
    return b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40) + b"\r\n\r\n", "TLS on a plain port"


def client_case(rng: random.Random, key: str, max_body: int) -> Case:
    path, seed = rng.choice(CLIENT_ROUTES)
    seed = _copy(seed)
    if rng.random() < 0.3 and "stream" in seed:
        seed["stream"] = True
        if "messages" in seed and path == "/v1/chat/completions":
            seed["stream_options"] = {"include_usage": True}
    who, headers = _credential(key, rng)
    headers = {"Content-Type": "application/json", **headers}
    roll = rng.random()
    if roll < 0.6:
        doc, kind = seed, "valid"
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            doc, did = mutate(doc, rng)
            kind = did if kind == "valid" else f"{kind}; {did}"
        body = dumps(doc)
    elif roll < 0.66:
        body, kind = dumps(seed), "valid"
    elif roll < 0.76:
        body, kind = rng.choice(WHOLE_BODIES), "a body that is not a request"
    elif roll < 0.86:
        body, extra, kind = _encoded(dumps(seed), rng, max_body)
        headers.update(extra)
    elif roll < 0.92:
        body, kind = dumps(seed), "odd headers"
        headers.update(rng.choice(ODD_HEADERS))
    elif roll < 0.96:
        method = rng.choice(METHODS)
        return Case("client", method, rng.choice([path, *ODD_PATHS]), f"method {method}", headers,
                    dumps(seed) if method not in ("GET", "HEAD") else None, key=who)
    else:
        raw, kind = _raw_request(path, key, dumps(seed), rng)
        return Case("client", "POST", path, kind, raw=raw, key="valid", half_close="shorter" in kind)
    if rng.random() < 0.03:
        return Case("client", "GET", "/v1/models", "models", headers, None, key=who)
    return Case("client", "POST", path, kind, headers, body, key=who)


def admin_case(rng: random.Random, token: str) -> Case:
    method, path, seed = rng.choice(ADMIN_ROUTES)
    roll = rng.random()
    if roll < 0.2:
        who, headers = rng.choice([("none", {}), ("wrong-admin", {"Authorization": "Bearer " + "0" * len(token)}),
                                   ("wrong-admin", {"Authorization": f"Bearer {token[:-1]}"}),
                                   ("wrong-admin", {"Authorization": f"Basic {token}"})])
    else:
        who, headers = "admin", {"Authorization": f"Bearer {token}"}
    headers["Content-Type"] = "application/json"
    kind = "valid"
    body = dumps(seed) if seed is not None else None
    roll = rng.random()
    if seed is not None and roll < 0.6:
        doc: object = seed
        for _ in range(rng.choice([1, 1, 2])):
            doc, did = mutate(doc, rng)
            kind = did if kind == "valid" else f"{kind}; {did}"
        body = dumps(doc)
    elif roll < 0.7:
        body, kind = rng.choice(WHOLE_BODIES), "a body that is not a request"
    elif roll < 0.8 and "?" in path:
        base, _, query = path.partition("?")
        names = [part.split("=")[0] for part in query.split("&")]
        value = rng.choice(["-1", "abc", "1e999", "nan", "inf", "99999999999999999999999", "", "%ff", "%00",
                            "x" * 3000, "0x10", "1;DROP TABLE usage"])
        path, kind = base + "?" + "&".join(f"{n}={value}" for n in names), f"query {value[:20]!r}"
    elif roll < 0.88:
        method, kind = rng.choice(METHODS), "method"
    elif roll < 0.91 and seed is not None:
        body, extra, kind = _encoded(dumps(seed), rng, 64 * 1024)
        headers.update(extra)
    elif roll < 0.95:
        path = path.replace("nope", rng.choice(["%00", "..", "x" * 2000, "%ff%fe", "sim", "a/b", "😀"]))
        kind = "odd path part"
    if body is not None and method in ("GET", "HEAD", "DELETE") and rng.random() < 0.8:
        body = None
    return Case("admin", method, path, kind, headers, body, key=who)


def cases(seed: int, indexes, key: str, token: str, max_body: int, admin_share: float = 0.2):
    """The cases numbered `indexes` of the run with `seed`, each from an RNG of its own."""
    for i in indexes:
        rng = random.Random(f"{seed}:{i}")  # noqa: S311 - reproducible cases by design, not secrets
        yield i, (admin_case(rng, token) if rng.random() < admin_share else client_case(rng, key, max_body))
