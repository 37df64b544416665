"""The answer cache: a project's answers reused for the very same request, in this process's memory only.

Per project and off by default (`llmgw keys cache`). An answer is kept in a
neutral form — the engine's JSON (a chat.completion for chat, messages and
responses; a text_completion; an embedding list) — and replayed in the
client's API shape, streamed or not, whichever way it was first asked: a
streamed and a non-streamed ask of one question share one answer.

Never written to the store or to disk, gone with a restart: the answers are
the one copy of model output llmgw would otherwise keep, and docs/cache.md
promises that none is. Bounded by `router.cache.max_bytes` (the answers used
longest ago go first) and `max_entry_bytes` (a longer answer is served, not
kept). Each worker process has its own.

The router never puts an answer here for a request under a `no_store`
policy or one whose redacted values are put back (`restore`): redacted, two
callers' requests read the same, and the reused answer would carry the first
caller's values. This module cannot tell; the router's checks are the guard.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from llmgw.router.translate import anthropic as anth
from llmgw.router.translate import responses as resp_api
from llmgw.router.translate.common import encode_sse

CACHE_HEADER = "x-llmgw-cache"
SIMILARITY_HEADER = "x-llmgw-cache-similarity"

APIS = ("chat", "completions", "embeddings", "messages", "responses")
RESULTS = ("hit", "similar", "miss", "bypass")

# Fields that change how an answer is delivered or recorded, never what it
# says. Every other field of the request is part of the key — the model, the
# messages, tools, tool_choice, every sampling setting, response_format, and
# any engine extension a client sends (min_p, chat_template_kwargs, …) — so
# a field this list does not know can only cost a miss, never give a wrong
# answer.
NOT_THE_ANSWER = frozenset({
    "stream", "stream_options", "user", "metadata", "store", "service_tier",
    "safety_identifier", "prompt_cache_key",
})

# What an entry costs beyond its bytes: the Entry object, its key and its
# OrderedDict slot, measured with sys.getsizeof and tracemalloc on CPython
# 3.11 (about 330 bytes); rounded up so many small answers are not undercounted.
ENTRY_OVERHEAD = 400


def key(project_id: str, api: str, body: dict[str, Any]) -> bytes:
    """The cache key of a request: a hash of what decides its answer.

    `body` is the request as the engine will be asked it (the chat form for
    messages and responses). Key order does not matter (the fields are
    sorted); the project and the API shape are part of the key, so no
    project ever reads another's answers.
    """
    return digest(b"llmgw-answer", project_id, api, body)


def digest(person: bytes, project_id: str, api: str, body: dict[str, Any]) -> bytes:
    """A hash of a request's fields but NOT_THE_ANSWER, in a project and API shape.

    `person` (up to 16 bytes) says what kind of key it is, so an answer's
    key and a conversation's (llmgw.router.similar) never collide.
    """
    kept = {k: v for k, v in body.items() if k not in NOT_THE_ANSWER}
    h = hashlib.blake2b(digest_size=32, person=person)
    h.update(project_id.encode())
    h.update(b"\0")
    h.update(api.encode())
    h.update(b"\0")
    h.update(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    return h.digest()


@dataclass(slots=True, eq=False)
class Entry:
    """One kept answer.

    `answer` is the engine's JSON answer, exactly the bytes a client of the
    chat or completions API got when it asked unstreamed (or the answer
    assembled from a stream, see Assembler). `ttl` is the project's when it
    was put; `stored_at` is time.time() then, for `Age`.
    """

    api: str
    answer: bytes
    stored_at: float
    ttl: float
    model: str = ""
    # Bytes charged to this entry beyond its answer: the similar-question
    # vectors that point at it (llmgw.router.similar).
    extra: int = 0
    size: int = field(default=0, init=False)

    @classmethod
    def make(cls, api: str, answer: bytes | dict, *, stored_at: float, ttl: float, model: str = "") -> "Entry":
        if api not in APIS:
            raise ValueError(f"no API shape {api!r}; the shapes are {', '.join(APIS)}")
        raw = answer if isinstance(answer, bytes) else orjson.dumps(answer)
        return cls(api, raw, stored_at, float(ttl), model)

    def expired(self, now: float) -> bool:
        return now >= self.stored_at + self.ttl

    def age(self, now: float) -> str:
        """The `Age` header's value: whole seconds since the answer was first given."""
        return str(max(0, int(now - self.stored_at)))


class AnswerCache:
    """Answers by key, least recently used first out, bounded in bytes.

    One event loop uses it; nothing here awaits, so no lock is needed. The
    counters are plain attributes for the router's metrics: `hits`,
    `similar_hits`, `misses`, `bypasses` (counted with `note`), and `bytes`
    and `entries` (what is held now).
    """

    def __init__(self, max_bytes: int, max_entry_bytes: int):
        self.max_bytes = int(max_bytes)
        self.max_entry_bytes = int(max_entry_bytes)
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        self._on_drop: list[Callable[[bytes], None]] = []
        self.bytes = 0
        self.hits = 0
        self.similar_hits = 0
        self.misses = 0
        self.bypasses = 0
        self.evictions = 0

    @property
    def entries(self) -> int:
        return len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cache_key: bytes) -> bool:
        return cache_key in self._entries

    def configure(self, max_bytes: int, max_entry_bytes: int) -> None:
        """Take new bounds now (router.cache changed): what no longer fits goes."""
        self.max_bytes = int(max_bytes)
        self.max_entry_bytes = int(max_entry_bytes)
        for k in [k for k, e in self._entries.items() if len(e.answer) > self.max_entry_bytes]:
            self._drop(k)
        self._shrink()

    def on_drop(self, listener: Callable[[bytes], None]) -> None:
        """Call `listener(cache_key)` whenever an entry leaves (evicted, expired, replaced, cleared)."""
        self._on_drop.append(listener)

    def get(self, cache_key: bytes, now: float) -> Entry | None:
        """The entry if it is held and within its TTL; it becomes the most recently used."""
        entry = self._entries.get(cache_key)
        if entry is None:
            return None
        if entry.expired(now):
            self._drop(cache_key)
            return None
        self._entries.move_to_end(cache_key)
        return entry

    def alive(self, cache_key: bytes, now: float) -> bool:
        """Whether `get` would answer, without making the entry recently used."""
        entry = self._entries.get(cache_key)
        return entry is not None and not entry.expired(now)

    def put(self, cache_key: bytes, entry: Entry) -> bool:
        """Keep `entry`; False when it is larger than max_entry_bytes (or the cache holds nothing)."""
        if len(entry.answer) > self.max_entry_bytes or self.max_bytes <= 0 or entry.ttl <= 0:
            return False
        if cache_key in self._entries:
            self._drop(cache_key)
        entry.extra = 0
        entry.size = len(entry.answer) + len(cache_key) + ENTRY_OVERHEAD
        self._entries[cache_key] = entry
        self.bytes += entry.size
        self._shrink()
        return cache_key in self._entries

    def charge(self, cache_key: bytes, nbytes: int) -> bool:
        """Count `nbytes` more (or fewer, negative) against an entry; False when it is gone.

        The similar-question index keeps its vectors under the same bound as
        the answers they lead to, and they leave together.
        """
        entry = self._entries.get(cache_key)
        if entry is None:
            return False
        nbytes = max(nbytes, -entry.extra)
        entry.extra += nbytes
        entry.size += nbytes
        self.bytes += nbytes
        if nbytes > 0:
            self._shrink()
        return cache_key in self._entries

    def discard(self, cache_key: bytes) -> None:
        if cache_key in self._entries:
            self._drop(cache_key)

    def sweep(self, now: float) -> int:
        """Drop every expired entry (a periodic task's job); how many went."""
        gone = [k for k, e in self._entries.items() if e.expired(now)]
        for k in gone:
            self._drop(k)
        return len(gone)

    def clear(self) -> None:
        for k in list(self._entries):
            self._drop(k)

    def note(self, result: str) -> None:
        """Count one request's outcome: hit, similar, miss or bypass (not asked: off, no_store, restore)."""
        if result == "hit":
            self.hits += 1
        elif result == "similar":
            self.similar_hits += 1
        elif result == "miss":
            self.misses += 1
        elif result == "bypass":
            self.bypasses += 1
        else:
            raise ValueError(f"no cache result {result!r}; the results are {', '.join(RESULTS)}")

    def _shrink(self) -> None:
        while self.bytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))
            self.evictions += 1

    def _drop(self, cache_key: bytes) -> None:
        entry = self._entries.pop(cache_key)
        self.bytes -= entry.size
        for listener in self._on_drop:
            listener(cache_key)


def hit_headers(entry: Entry, now: float, similarity: float | None = None) -> dict[str, str]:
    """What a reused answer carries: x-llmgw-cache hit|similar, Age, and the similarity when similar."""
    if similarity is None:
        return {CACHE_HEADER: "hit", "Age": entry.age(now)}
    return {CACHE_HEADER: "similar", SIMILARITY_HEADER: f"{similarity:.4f}", "Age": entry.age(now)}


# -- replaying ----------------------------------------------------------------


def replay_json(entry: Entry, api: str, *, model: str = "", request: dict | None = None) -> bytes:
    """The answer as an unstreamed response body in `api`'s shape.

    `model` is the name the client asked for and `request` the client's own
    body: the messages and responses shapes echo them (thinking shown or
    not, the Responses settings) as a fresh answer would.
    """
    _same_api(entry, api)
    if api in ("chat", "completions", "embeddings"):
        return entry.answer  # the bytes the first client got: no second encoding
    answer = orjson.loads(entry.answer)
    if api == "messages":
        return orjson.dumps(anth.chat_to_message(answer, model=model or answer.get("model") or "",
                                                 include_thinking=anth.wants_thinking(request or {})))
    return orjson.dumps(resp_api.chat_to_response(answer, model=model or answer.get("model") or "",
                                                  request=request or {}))


def replay_stream(entry: Entry, api: str, *, model: str = "", request: dict | None = None,
                  include_usage: bool = False) -> bytes:
    """The whole answer as one write of Server-Sent Events in `api`'s shape, ending as a stream ends.

    Chat and completions get the engine's chunk events and `data: [DONE]`
    (the usage event only with `include_usage`, as stream_options asked);
    messages and responses get their own events, rendered by the same
    translators a live stream goes through.
    """
    _same_api(entry, api)
    if api == "embeddings":
        raise ValueError("embeddings are never streamed")
    answer = orjson.loads(entry.answer)
    if api == "completions":
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in completion_chunks(answer, include_usage)) \
            + b"data: [DONE]\n\n"
    chunks = chat_chunks(answer, include_usage or api != "chat")
    if api == "chat":
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    name = model or answer.get("model") or ""
    if api == "messages":
        translator: Any = anth.MessagesStream(model=name, include_thinking=anth.wants_thinking(request or {}))
    else:
        translator = resp_api.ResponsesStream(model=name, request=request or {})
    events: list = []
    for chunk in chunks:
        events.extend(translator.feed(chunk))
    events.extend(translator.finish())
    return encode_sse(events)


def _same_api(entry: Entry, api: str) -> None:
    if entry.api != api:
        # The API shape is part of the key, so only a caller's mistake gets here.
        raise ValueError(f"this answer was kept for the {entry.api} API, not {api}")


def chat_chunks(answer: dict, include_usage: bool) -> list[dict]:
    """A chat.completion as the chat.completion.chunk events an engine would have streamed.

    Each choice's thinking, text and tool calls in one delta each, then its
    finish; the usage last, in a chunk with no choices, as vLLM sends it.
    """
    head = {"id": answer.get("id") or "", "object": "chat.completion.chunk",
            "created": answer.get("created") or 0, "model": answer.get("model") or ""}
    if answer.get("system_fingerprint") is not None:
        head["system_fingerprint"] = answer["system_fingerprint"]
    chunks: list[dict] = []

    def add(index: int, delta: dict, finish: str | None = None) -> None:
        chunks.append({**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]})

    for choice in answer.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        role: dict = {"role": message.get("role") or "assistant"}
        for name in ("reasoning_content", "reasoning"):
            if isinstance(message.get(name), str) and message[name]:
                add(index, {**role, name: message[name]})
                role = {}
                break
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content:
            add(index, {**role, "content": content})
            role = {}
        for n, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            piece = {"index": n, "id": call.get("id"), "type": call.get("type") or "function",
                     "function": {"name": function.get("name") or "", "arguments": function.get("arguments") or ""}}
            add(index, {**role, **({"content": None} if role else {}), "tool_calls": [piece]})
            role = {}
        if role:  # an empty answer still says who is speaking
            add(index, {**role, "content": ""})
        add(index, {}, choice.get("finish_reason") or "stop")
    if include_usage and isinstance(answer.get("usage"), dict):
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks


def completion_chunks(answer: dict, include_usage: bool) -> list[dict]:
    """A text_completion as the events a streamed one is: each choice's text, then its finish."""
    head = {"id": answer.get("id") or "", "object": "text_completion",
            "created": answer.get("created") or 0, "model": answer.get("model") or ""}
    choices = [c for c in answer.get("choices") or [] if isinstance(c, dict)]
    chunks = [{**head, "choices": [{"index": c.get("index", 0), "text": c.get("text") or "", "logprobs": None,
                                    "finish_reason": None}]} for c in choices if c.get("text")]
    chunks += [{**head, "choices": [{"index": c.get("index", 0), "text": "", "logprobs": None,
                                     "finish_reason": c.get("finish_reason") or "stop"}]} for c in choices]
    if include_usage and isinstance(answer.get("usage"), dict):
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks


# -- keeping a streamed answer --------------------------------------------------


class Assembler:
    """Builds the whole answer from a chat or completions stream, to keep it.

    Feed it the engine's chunks (`feed`, parsed) or complete SSE blocks
    (`feed_sse`, as relay() hands them to a transform). `answer()` is the
    chat.completion (or text_completion) a non-streamed ask would have
    given, or None when the stream did not end whole — an engine's error
    event, a choice with no finish, no [DONE] — so a cut answer is never kept.
    """

    def __init__(self) -> None:
        self._head: dict[str, Any] = {}
        self._object = "chat.completion"
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: dict | None = None
        self.failed = False
        self.done = False
        self.bytes = 0

    def feed_sse(self, block: bytes) -> None:
        for event in block.replace(b"\r\n", b"\n").split(b"\n\n"):
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                    continue
                try:
                    chunk = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    self.failed = True
                    continue
                self.feed(chunk)

    def feed(self, chunk: dict) -> None:
        if not isinstance(chunk, dict) or chunk.get("error") or chunk.get("object") == "error":
            self.failed = True
            return
        if not self._head:
            self._head = {k: chunk.get(k) for k in ("id", "created", "model")}
            if chunk.get("system_fingerprint") is not None:
                self._head["system_fingerprint"] = chunk["system_fingerprint"]
            if chunk.get("object") == "text_completion":
                self._object = "text_completion"
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: dict) -> None:
        index = choice.get("index", 0)
        state = self._choices.setdefault(index, {"text": [], "reasoning": [], "reasoning_key": None,
                                                 "role": None, "tools": {}, "finish": None})
        if self._object == "text_completion":
            if isinstance(choice.get("text"), str):
                state["text"].append(choice["text"])
                self.bytes += len(choice["text"])
        else:
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if delta.get("role"):
                state["role"] = delta["role"]
            if isinstance(delta.get("content"), str):
                state["text"].append(delta["content"])
                self.bytes += len(delta["content"])
            for name in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(name), str) and delta[name]:
                    # vLLM sent both names for a while; keep the first one seen.
                    if state["reasoning_key"] in (None, name):
                        state["reasoning_key"] = name
                        state["reasoning"].append(delta[name])
                        self.bytes += len(delta[name])
            for piece in delta.get("tool_calls") or []:
                if not isinstance(piece, dict):
                    continue
                tool = state["tools"].setdefault(piece.get("index", 0),
                                                 {"id": None, "type": "function", "name": "", "arguments": []})
                if piece.get("id"):
                    tool["id"] = piece["id"]
                if piece.get("type"):
                    tool["type"] = piece["type"]
                function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
                if function.get("name"):
                    tool["name"] += function["name"]
                if isinstance(function.get("arguments"), str):
                    tool["arguments"].append(function["arguments"])
                    self.bytes += len(function["arguments"])
        if choice.get("finish_reason"):
            state["finish"] = choice["finish_reason"]

    @property
    def complete(self) -> bool:
        return (not self.failed and bool(self._choices)
                and all(c["finish"] for c in self._choices.values()))

    def answer(self, *, require_done: bool = True) -> dict | None:
        """The whole answer, or None when the stream did not end whole.

        `require_done` wants the `data: [DONE]` line; pass False when feeding
        parsed chunks, which carry no such line.
        """
        if not self.complete or (require_done and not self.done):
            return None
        choices = []
        for index in sorted(self._choices):
            c = self._choices[index]
            if self._object == "text_completion":
                choices.append({"index": index, "text": "".join(c["text"]), "logprobs": None,
                                "finish_reason": c["finish"]})
                continue
            message: dict[str, Any] = {"role": c["role"] or "assistant",
                                       "content": "".join(c["text"]) if c["text"] else None}
            if c["reasoning"]:
                message[c["reasoning_key"]] = "".join(c["reasoning"])
            if c["tools"]:
                message["tool_calls"] = [
                    {"id": t["id"], "type": t["type"], "function": {"name": t["name"],
                                                                   "arguments": "".join(t["arguments"])}}
                    for _, t in sorted(c["tools"].items())]
            choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": c["finish"]})
        answer = {**self._head, "object": self._object, "choices": choices}
        if self._usage is not None:
            answer["usage"] = self._usage
        return answer
