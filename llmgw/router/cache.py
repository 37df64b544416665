"""The answer cache: a project's answers reused for the very same request, in this process's memory only.

Per project and off by default (`llmgw keys cache`). An answer is kept in a
neutral form — the engine's JSON (a chat.completion for chat, messages and
responses; a text_completion; an embedding list) — and replayed in the
client's API shape, streamed or not, whichever way it was first asked: a
streamed and a non-streamed ask of one question share one answer. Kept
here; replayed by llmgw.router.replay; a streamed answer is built whole for
keeping by llmgw.router.assembly.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from llmgw.router.wire import JSON

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
    assembled from a stream, see llmgw.router.assembly). `ttl` is the project's when it
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
    def make(cls, api: str, answer: bytes | JSON, *, stored_at: float, ttl: float, model: str = "") -> Entry:
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
