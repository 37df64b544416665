"""What a sim-engine was told to be: its model, its speed and the failures it plays."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "sim"
    # Per stream, not per engine: a real engine slows as its batch grows, but
    # the sim's job is to be a known quantity, so every stream gets the rate.
    tokens_per_second: float = 0.0
    ttft: float = 0.0
    max_tokens_default: int = 16
    context_length: int = 32768
    api_keys: frozenset[str] = frozenset()
    refused_keys: dict[str, int] = field(default_factory=dict)
    fail_status: int | None = None
    # --fail-on WORD=STATUS: a chat or completions request whose text holds WORD gets STATUS, as
    # one prompt that trips an engine's bug would, while every other request is answered.
    fail_words: dict[str, int] = field(default_factory=dict)
    cut_after: int | None = None
    # --stall-after N: a stream longer than N tokens sends N and then nothing more until the client hangs up,
    # an answer caught mid-way for as long as a test needs it there (a Stop button's, say), however slow it runs.
    stall_after: int | None = None
    hang: bool = False
    # A sentence-transformers model behind /v1/embeddings (semantic.py):
    # "all-MiniLM-L6-v2" or a model folder. None: the hashed vectors of embed.py.
    embedding_model: str | None = None
    # Answer chat with the last user message's own words: what reached the
    # engine, seen from the client (a gateway's redaction, say).
    echo: bool = False
    # Answer chat as a guard model (Qwen3Guard-Gen) does: "Safety: Unsafe"
    # with the category of each of these words found in the last message,
    # else "Safety: Safe". Empty: not a guard model.
    guard_words: dict[str, str] = field(default_factory=dict)
    # Seconds /health answers 503 after start, as vLLM's does while it loads
    # weights: a replica that stays "starting" long enough to be seen so.
    loading: float = 0.0
    # A file each /v1 request's path and headers (less Authorization) are appended to, one JSON line
    # each: what a gateway sent the engine besides the body (X-Request-Id, a W3C traceparent).
    headers_log: str | None = None

    @property
    def interval(self) -> float:
        """Seconds between two tokens of one stream; 0 sends them all at once."""
        return 1.0 / self.tokens_per_second if self.tokens_per_second > 0 else 0.0
