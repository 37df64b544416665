"""Answers to similar questions: a reworded question in the same conversation gets the answer already given.

For a project with `llmgw keys cache --similar T`. The question is the last
user message; everything else of the request — the model, the system
prompt, every earlier turn, tools, response_format, the sampling settings,
the project — is hashed into a conversation key that must match exactly: a
like question in another conversation is not the same question. Within one
conversation the last user message is embedded (by the Embedder the router
gives, `router.cache.embedding_model` asked as the question's project would,
never an outside model) and compared by cosine similarity with the
questions already answered there; one at T or above gets that answer.

Not for a question over 2,000 characters, one with a picture, a sound or a
file in it (two questions about different pictures read alike), or one
right after a tool's result (the answer turns on what the tool said, which
the earlier turns hold but the embedding does not weigh). Those are reused
only when they are the very same request (llmgw.router.cache).

The vectors live beside the answers, in this process's memory, and are
counted in the same `router.cache.max_bytes`: each vector is charged to the
answer it leads to, and leaves with it (evicted, expired or replaced).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from operator import mul
from typing import Any, Protocol

from llmgw.router.cache import AnswerCache, digest

log = logging.getLogger("llmgw.router.similar")

MAX_QUESTION_CHARS = 2000
EMBED_BUDGET = 2.0  # seconds, router.cache.embedding_budget's default; every miss of a --similar project waits
# The questions kept per conversation, newest kept. A help desk's rewordings
# of one question are a handful; 64 bounds one lookup to 64 dot products
# (about 1 ms for 384 dimensions in pure Python) however long a conversation
# is reused.
PER_CONVERSATION = 64
# A vector's cost beyond its float32 values: the array object and its pair.
VECTOR_OVERHEAD = 120

# Content parts that are text. Any other part — image_url, input_audio,
# file, Anthropic's image/document, Responses' input_image/input_file —
# means the question is more than its words.
_TEXT_PARTS = frozenset({"text", "input_text"})
_TOOL_RESULT_PARTS = frozenset({"tool_result", "function_call_output"})


class Embedder(Protocol):
    """Turns a question into a vector. The router's asks the catalog's embedding model through its own routing."""

    async def embed(self, text: str) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class Question:
    conversation: bytes  # the key of everything but the last user message
    text: str  # the last user message's words, what is embedded


def question(project_id: str, api: str, body: dict[str, Any]) -> Question | None:
    """The question a request asks, or None when similar questions must not answer it.

    `body` is the chat form (messages, with the system prompt as its first
    message; for the messages and responses APIs the translated body the
    engine is asked). Anthropic's own form works too: its top-level
    `system` is hashed with the rest.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None  # after a tool's result (role tool), or an assistant prefill
    text = _words(last.get("content"))
    if text is None or not text.strip() or len(text) > MAX_QUESTION_CHARS:
        return None
    earlier = {**body, "messages": messages[:-1]}
    return Question(digest(b"llmgw-convers", project_id, api, earlier), text)


def _words(content: Any) -> str | None:
    """A user message's text; None when it carries anything but text (or a tool's result)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    pieces = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
            continue
        if not isinstance(part, dict):
            return None
        kind = part.get("type")
        if kind in _TOOL_RESULT_PARTS or kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            return None
        pieces.append(part["text"])
    return "\n".join(pieces)


def unit(values: Any) -> array[float] | None:
    """`values` as a float32 unit vector, None when it is empty, not numbers, or zero."""
    try:
        vec = array("f", values)
    except (TypeError, ValueError, OverflowError):
        return None
    norm = math.sqrt(sum(map(mul, vec, vec)))
    if not vec or not math.isfinite(norm) or norm == 0.0:
        return None
    return array("f", (x / norm for x in vec))


async def embed_question(embedder: Embedder, text: str, budget: float = EMBED_BUDGET) -> array[float] | None:
    """The question's unit vector within `budget` seconds, or None: then only the very same request is reused.

    An embedding model that is slow, down or answers nonsense must cost a
    question the similar lookup, never the answer.
    """
    try:
        async with asyncio.timeout(budget):
            values = await embedder.embed(text)
    except TimeoutError:
        log.info("the embedding model did not answer within %.1f s; this question is looked up exactly", budget)
        return None
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the model or the way to it: the lookup is skipped
        log.info("the embedding model failed (%s); this question is looked up exactly", e)
        return None
    return unit(values)


class SimilarIndex:
    """Per conversation key, the (vector, cache key) of each question answered there.

    Bounded by the AnswerCache it sits beside: a vector's bytes are charged
    to its answer's entry, and when that entry leaves the cache its vectors
    leave the index. Conversations are kept least recently used first, so
    an emptied one costs nothing.
    """

    def __init__(self, cache: AnswerCache, per_conversation: int = PER_CONVERSATION):
        self.cache = cache
        self.per_conversation = per_conversation
        self._conversations: OrderedDict[bytes, list[tuple[array[float], bytes]]] = OrderedDict()
        self._where: dict[bytes, set[bytes]] = {}  # cache key -> conversations holding a vector for it
        cache.on_drop(self._forget)

    @property
    def vectors(self) -> int:
        return sum(len(pairs) for pairs in self._conversations.values())

    def __len__(self) -> int:
        return len(self._conversations)

    def add(self, conversation: bytes, vector: array[float] | list[float], cache_key: bytes) -> bool:
        """Remember that `vector`'s question was answered by `cache_key`; False when that answer is not held."""
        vec = vector if isinstance(vector, array) and vector.typecode == "f" else unit(vector)
        if vec is None or cache_key not in self.cache:
            return False
        if not self.cache.charge(cache_key, _cost(vec)):
            return False  # the charge pushed the answer itself out: nothing to point at
        pairs = self._conversations.setdefault(conversation, [])
        self._conversations.move_to_end(conversation)
        pairs.append((vec, cache_key))
        self._where.setdefault(cache_key, set()).add(conversation)
        while len(pairs) > self.per_conversation:
            old_vec, old_key = pairs.pop(0)
            self.cache.charge(old_key, -_cost(old_vec))
            if not any(k == old_key for _, k in pairs):
                self._unlink(old_key, conversation)
        return True

    async def lookup(self, conversation: bytes, vector: array[float] | list[float], threshold: float,
                     now: float | None = None) -> tuple[bytes, float] | None:
        """The cache key of the most similar question answered in this conversation, and its similarity,
        when that reaches `threshold`; None otherwise.

        Only answers still within their TTL are considered.
        """
        pairs = self._conversations.get(conversation)
        if not pairs:
            return None
        vec = vector if isinstance(vector, array) and vector.typecode == "f" else unit(vector)
        if vec is None:
            return None
        now = time.time() if now is None else now
        self._conversations.move_to_end(conversation)
        best: tuple[bytes, float] | None = None
        for other, cache_key in pairs:
            if len(other) != len(vec):
                continue  # asked of another embedding model before a change of router.cache.embedding_model
            similarity = sum(map(mul, vec, other))
            if similarity >= threshold and (best is None or similarity > best[1]) \
                    and self.cache.alive(cache_key, now):
                best = (cache_key, min(1.0, similarity))
        return best

    def clear(self) -> None:
        """Forget every vector (the embedding model changed), giving their bytes back to their answers."""
        for pairs in self._conversations.values():
            for vec, cache_key in pairs:
                self.cache.charge(cache_key, -_cost(vec))
        self._conversations.clear()
        self._where.clear()

    def _forget(self, cache_key: bytes) -> None:
        """The answer left the cache: so do the vectors leading to it (their bytes went with its entry)."""
        for conversation in self._where.pop(cache_key, ()):
            pairs = self._conversations.get(conversation)
            if pairs is None:
                continue
            pairs[:] = [(v, k) for v, k in pairs if k != cache_key]
            if not pairs:
                del self._conversations[conversation]

    def _unlink(self, cache_key: bytes, conversation: bytes) -> None:
        held = self._where.get(cache_key)
        if held is not None:
            held.discard(conversation)
            if not held:
                del self._where[cache_key]


def _cost(vec: array[float]) -> int:
    return vec.itemsize * len(vec) + VECTOR_OVERHEAD
