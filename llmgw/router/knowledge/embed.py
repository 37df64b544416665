"""Texts embedded through the gateway's own /v1/embeddings, as the key that asked (docs/knowledge.md).

A knowledge base's passages and questions are the key's requests like any
other: its limits, budgets and guardrails hold, routing and retries are the
router's, and each call leaves the key's usage row. An import waits in the
lowest admission band, so people's questions are let in first; told to
wait (429, or 503/504 with Retry-After), it waits as told and asks again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson

from llmgw.account import Principal
from llmgw.router.apis import by_route
from llmgw.router.batches import lowest_band
from llmgw.router.call import new_request_id
from llmgw.router.handlers import Inside, serve
from llmgw.router.plane import ClientPlane

PROFILE = "batch"  # the shortest queue: an embedding has no conversation to keep on one replica
RETRY_STATUSES = (429, 503, 504)
MOST_WAIT = 60.0  # seconds an import waits at once, whatever Retry-After says
IMPORT_TRIES = 30  # an import told to wait this many times in a row fails, saying so


@dataclass
class EmbedFailed(Exception):
    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def _error(status: int, body: object) -> EmbedFailed:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return EmbedFailed(status, str(error.get("code") or error.get("type") or "embedding_failed"),
                           str(error.get("message") or "the embedding model refused"))
    return EmbedFailed(status, "embedding_failed", f"the embedding model answered {status}")


async def embed_once(plane: ClientPlane, principal: Principal, model: str, texts: list[str], *,
                     band: str | None) -> tuple[list[list[float]], float | None]:
    """The texts' vectors; EmbedFailed with the answer's error, and how long it said to wait, if any."""
    inside = Inside(body={"model": model, "input": texts}, profile=PROFILE, band=band)
    response = await serve(plane, by_route("/v1/embeddings"), principal, new_request_id(), None, inside)
    raw = getattr(response, "body", None)
    try:
        body = orjson.loads(raw) if isinstance(raw, (bytes, bytearray)) else None
    except orjson.JSONDecodeError:
        body = None
    if response.status >= 400:
        failed = _error(response.status, body)
        after = response.headers.get("Retry-After")
        if response.status in RETRY_STATUSES:
            raise _Wait(failed, float(after) if after and after.replace(".", "", 1).isdigit() else 1.0)
        raise failed
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != len(texts):
        raise EmbedFailed(502, "embedding_failed", f"{model} answered {len(data or [])} vectors for "
                                                   f"{len(texts)} texts")
    ordered = sorted(data, key=lambda item: int(item.get("index", 0)))
    return [list(item["embedding"]) for item in ordered], None


class _Wait(Exception):
    def __init__(self, failed: EmbedFailed, seconds: float):
        super().__init__(str(failed))
        self.failed, self.seconds = failed, seconds


async def embed_question(plane: ClientPlane, principal: Principal, model: str, text: str) -> list[float]:
    """A question's vector, asked in the key's own band, once: a person is waiting."""
    try:
        vectors, _ = await embed_once(plane, principal, model, [text], band=principal.key.band)
    except _Wait as wait:
        raise wait.failed from None
    return vectors[0]


async def embed_import(plane: ClientPlane, principal: Principal, model: str, texts: list[str]) -> list[list[float]]:
    """Passages' vectors, asked in the lowest band, waiting as often as told to (IMPORT_TRIES at most)."""
    band = lowest_band(plane.settings.current.router.admission)
    for _ in range(IMPORT_TRIES):
        try:
            vectors, _ = await embed_once(plane, principal, model, texts, band=band)
            return vectors
        except _Wait as wait:
            last = wait.failed
            await asyncio.sleep(min(MOST_WAIT, max(0.1, wait.seconds)))
    raise EmbedFailed(last.status, last.code, f"{last.message} (told to wait {IMPORT_TRIES} times in a row)")
