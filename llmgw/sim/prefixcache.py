"""A prefix cache as vLLM keeps one, for sim-engine: blocks of a prompt's tokens kept, found again, evicted, told.

With `--tokenizer` the sim cuts each prompt into the model's own tokens (router/prompttokens.py, the same code the
router uses, as vLLM's tokenizer is the one the router reads), in blocks of `--block-size`, each named by a sha256
over the block before it and its tokens, as vLLM's default hash is. A request finds the blocks it starts with that
are still held; the rest are stored, and the least recently used go when more than `--cache-blocks` are held,
each prompt's last blocks before its first (vLLM frees a request's blocks tail first, so a prefix outlives what
followed it). Its /metrics count the prompt tokens looked up and found (vllm:prefix_cache_queries and _hits), and
with `--kv-events-config` it publishes BlockStored and BlockRemoved as vLLM does (engines/kvevents.py), on a
ZeroMQ PUB socket, so the agent and the router are tested against the same frames.

With `--prefill-tokens-per-second` the first token waits for the prompt tokens not found, at that rate: the time
a cache saves is then there to measure.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from typing import Any

from llmgw.engines import KV_TOPIC, Removed, Stored, encode_batch
from llmgw.router import PromptTokens

SEED = b"llmgw-sim"


class KvEventsConfigError(ValueError):
    """A --kv-events-config the sim cannot publish by; the sentence says why."""


class Publisher:
    """vLLM's ZmqEventPublisher's frames: topic, an 8-byte big-endian sequence number, the batch."""

    def __init__(self, config: str) -> None:
        try:
            doc = json.loads(config)
        except ValueError as e:
            raise KvEventsConfigError(f"--kv-events-config is not JSON: {e}") from None
        endpoint = doc.get("endpoint") if isinstance(doc, dict) else None
        if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
            raise KvEventsConfigError('--kv-events-config needs an "endpoint" of tcp://HOST:PORT')
        import zmq

        self.topic = str(doc.get("topic", KV_TOPIC)).encode()
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        # As vLLM's publisher: a wildcard address is bound, any other connected to (its subscriber binds it).
        if "*" in endpoint:
            self._socket.bind(endpoint)
        else:
            self._socket.connect(endpoint)
        self._noblock = zmq.NOBLOCK
        self._again = zmq.Again
        self._seq = 0

    def publish(self, events: list[Any]) -> None:
        if not events:
            return
        frames = (self.topic, self._seq.to_bytes(8, "big"), encode_batch(time.time(), events))
        self._seq += 1
        try:
            self._socket.send_multipart(frames, flags=self._noblock)
        except self._again:
            pass  # past its high-water mark, as vLLM's publisher drops: the subscriber sees the gap

    def close(self) -> None:
        self._socket.close(linger=0)
        self._context.term()


class PrefixCache:
    def __init__(self, tokenizer: str, block_size: int = 16, capacity: int = 4096,
                 publisher: Publisher | None = None, prefill_rate: float = 0.0) -> None:
        self.tokens = PromptTokens(tokenizer)
        self.prefill_rate = prefill_rate
        self.block_size = block_size
        self.capacity = capacity
        self.publisher = publisher
        self._held: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self.queries = 0
        self.hits = 0

    def prompt_ids(self, body: dict[str, Any]) -> list[int]:
        messages, prompt = body.get("messages"), body.get("prompt")
        if isinstance(messages, list):
            return self.tokens.chat(messages, body.get("tools"))
        if isinstance(prompt, str):
            return self.tokens.text(prompt)
        return []

    def admit(self, body: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, of them found in the cache) for one request, its blocks now held."""
        ids = self.prompt_ids(body)
        size = self.block_size
        hashes, parent = [], SEED
        for start in range(0, len(ids) - size + 1, size):
            parent = hashlib.sha256(parent + b"".join(t.to_bytes(4, "little", signed=True)
                                                      for t in ids[start:start + size])).digest()
            hashes.append(parent)
        found = 0
        while found < len(hashes) and hashes[found] in self._held:
            found += 1
        new = hashes[found:]
        for h in new:
            self._held[h] = None
        # Most recent last, the first block last of all: a prompt's tail is evicted before its head.
        for h in reversed(hashes):
            self._held.move_to_end(h)
        evicted = []
        while len(self._held) > self.capacity:
            evicted.append(self._held.popitem(last=False)[0])
        if self.publisher is not None:
            events: list[Any] = []
            if new:
                first = found * size
                events.append(Stored(tuple(new), hashes[found - 1] if found else None,
                                     tuple(ids[first:first + len(new) * size]), size))
            if evicted:
                events.append(Removed(tuple(evicted)))
            self.publisher.publish(events)
        self.queries += len(ids)
        self.hits += found * size
        return len(ids), found * size

    def prefill_seconds(self, prompt: int, found: int) -> float:
        """How long the tokens not found take to read, at --prefill-tokens-per-second."""
        return (prompt - found) / self.prefill_rate if self.prefill_rate > 0 else 0.0

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
