"""Answers from knowledge bases: `file_search` in /v1/responses, `knowledge_bases` in /v1/chat/completions.

Before the request is translated for the engine, the passages that answer
its last user message are found (retrieval.py: vectors and words, fused)
and put in front of the model, numbered, with the instruction to cite them
as [n]. They are then part of the request like any text the client sent:
the input guardrails read them, and a passage carrying an injection is
treated as the policy says. The engine needs no tool calling: every local
model can answer from passages, not every one can call a tool.

The whole answer then says where it came from: each [n] the model wrote
becomes a `file_citation` annotation naming the file (OpenAI's shape in
/v1/responses, after a `file_search_call` output item; llmgw's own
`annotations` on a chat completion's message). A streamed answer ends with
them (router/citing.py): a chat stream in one chunk before its [DONE], a
/v1/responses stream in its response.completed event.

A request with neither pays one dictionary lookup (`asks`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.account import Principal
from llmgw.kb import HYBRID, Filter, FilterError, Hit, KbIndex, kept_by, pack, parse_filter, search
from llmgw.router.call import Refuse
from llmgw.router.knowledge.access import READ, allowed
from llmgw.router.knowledge.embed import EmbedFailed, embed_question
from llmgw.router.plane import ClientPlane
from llmgw.store import StoreError, VectorStore

log = logging.getLogger("llmgw.kb")

DEFAULT_RESULTS = 8  # passages put before the model: about 1,600 tokens at the default passage size
MOST_RESULTS = 50
MOST_BASES = 10
_MARK = re.compile(r"\[(\d{1,2})\]")

INSTRUCTION = ("Answer from the numbered passages below where they hold the answer, and cite each passage you "
               "use by its number in square brackets, as [1]. If they do not hold the answer, say so.")


@dataclass(frozen=True)
class Retrieved:
    query: str
    hits: list[Hit]
    with_results: bool  # responses' include: file_search_call.results


def asks(api: str, body: Any) -> bool:
    """Whether the request names knowledge bases: the only cost to a request that does not."""
    if not isinstance(body, dict):
        return False
    if api == "chat":
        return "knowledge_bases" in body
    if api == "responses":
        tools = body.get("tools")
        return isinstance(tools, list) and any(isinstance(t, dict) and t.get("type") == "file_search" for t in tools)
    return False


class Augmenter:
    """Finds the passages for a request and puts them before the model; annotates the answer with them
    (router.augmenting.Augmenting)."""

    def __init__(self, plane: ClientPlane, index: KbIndex) -> None:
        self.plane, self.index = plane, index

    def asks(self, api: str, body: Any) -> bool:
        return asks(api, body)

    def annotate(self, api: str, answer: dict[str, Any], retrieved: Any) -> dict[str, Any]:
        return annotate(api, answer, retrieved) if isinstance(retrieved, Retrieved) else answer

    def cited_event(self, api: str, answer: dict[str, Any] | None, retrieved: Any) -> bytes:
        return cited_event(api, answer, retrieved) if isinstance(retrieved, Retrieved) else b""

    async def augment(self, principal: Principal, api: str, body: dict[str, Any]) -> tuple[dict[str, Any],
                                                                                          Retrieved | None]:
        try:
            return await self._augment(principal, api, body)
        except StoreError as e:
            log.warning("knowledge bases for a request: the store did not answer: %s", e)
            raise Refuse(503, "the knowledge bases this request names cannot be read right now; try again in a "
                              "few seconds", "store_unavailable", headers={"Retry-After": "5"}) from None

    async def _augment(self, principal: Principal, api: str, body: dict[str, Any]) -> tuple[dict[str, Any],
                                                                                           Retrieved | None]:
        test: Filter | None = None
        if api == "responses":
            ids, most, with_results, test, body = _file_search(body)
        else:
            ids, most, with_results, body = _knowledge_bases(body)
        if not ids:
            return body, None
        bases = [await self._own(principal, vs_id) for vs_id in dict.fromkeys(ids)]
        query = _last_user_text(api, body)
        if not query:
            return body, Retrieved("", [], with_results)
        hits: list[Hit] = []
        by_model: dict[str, list[str]] = {}
        for vs in bases:
            by_model.setdefault(vs.embedding_model, []).append(vs.id)
        for model, vs_ids in by_model.items():
            try:
                vector = pack(await embed_question(self.plane, principal, model, query))
            except EmbedFailed as e:
                raise Refuse(e.status, f"the question could not be embedded by {model}, which embeds "
                                       f"{', '.join(vs_ids)}: {e.message}", e.code) from None
            only = None if test is None else await kept_by(self.plane.store, vs_ids, test)
            hits += await search(self.plane.store, self.index, vs_ids, query, vector, most, HYBRID, only)
        hits = sorted(hits, key=lambda h: -h.score)[:most]
        retrieved = Retrieved(query, hits, with_results)
        return _put_before_model(api, body, _context(hits)), retrieved

    async def _own(self, principal: Principal, vs_id: str) -> VectorStore:
        return await allowed(self.plane.store, principal, vs_id, READ, param="vector_store_ids")


def _ids(value: Any, param: str) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > MOST_BASES or not all(
            isinstance(v, str) for v in value):
        raise Refuse(400, f"{param} is a list of 1 to {MOST_BASES} knowledge base ids (vs_…)", "invalid_request",
                     param=param)
    return list(value)


def _most(value: Any, param: str) -> int:
    if value is None:
        return DEFAULT_RESULTS
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MOST_RESULTS:
        raise Refuse(400, f"{param} is a whole number from 1 to {MOST_RESULTS}", "invalid_request", param=param)
    return value


def _file_search(body: dict[str, Any]) -> tuple[list[str], int, bool, Filter | None, dict[str, Any]]:
    """The file_search tools' bases, size and filter, and the body without them (the engine has no such tool)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return [], 0, False, None, body
    ids: list[str] = []
    most = DEFAULT_RESULTS
    test: Filter | None = None
    for n, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "file_search":
            ids += _ids(tool.get("vector_store_ids"), f"tools[{n}].vector_store_ids")
            most = _most(tool.get("max_num_results"), f"tools[{n}].max_num_results")
            if tool.get("filters") is not None:
                try:
                    test = parse_filter(tool["filters"], f"tools[{n}].filters")
                except FilterError as e:
                    raise Refuse(400, f"{e}; docs/knowledge.md shows the filters", "invalid_request",
                                 param=f"tools[{n}].filters") from None
    rest = [t for t in tools if not (isinstance(t, dict) and t.get("type") == "file_search")]
    include = body.get("include")
    with_results = isinstance(include, list) and "file_search_call.results" in include
    changed = {k: v for k, v in body.items() if k not in ("tools", "include")}
    if rest:
        changed["tools"] = rest
    if isinstance(include, list):
        others = [i for i in include if i != "file_search_call.results"]
        if others:
            changed["include"] = others
    if not rest:
        changed.pop("tool_choice", None)  # no tool left to choose
    return ids, most, with_results, test, changed


def _knowledge_bases(body: dict[str, Any]) -> tuple[list[str], int, bool, dict[str, Any]]:
    """llmgw's own fields of a chat completion: knowledge_bases and knowledge_max_results, taken out."""
    changed = {k: v for k, v in body.items() if k not in ("knowledge_bases", "knowledge_max_results")}
    if "knowledge_bases" not in body:
        return [], 0, False, changed
    return (_ids(body["knowledge_bases"], "knowledge_bases"),
            _most(body.get("knowledge_max_results"), "knowledge_max_results"), False, changed)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _last_user_text(api: str, body: dict[str, Any]) -> str:
    items = body.get("input") if api == "responses" else body.get("messages")
    if isinstance(items, str):
        return items.strip()
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text(item.get("content")).strip()
    return ""


def _context(hits: Sequence[Hit]) -> str:
    if not hits:
        return "No passage of the knowledge bases matches this question; say that they do not hold the answer."
    parts = [INSTRUCTION]
    for n, hit in enumerate(hits, 1):
        parts.append(f"[{n}] ({hit.passage.filename})\n{hit.passage.text}")
    return "\n\n".join(parts)


def _put_before_model(api: str, body: dict[str, Any], context: str) -> dict[str, Any]:
    if api == "responses":
        instructions = body.get("instructions")
        joined = context if not isinstance(instructions, str) or not instructions else f"{instructions}\n\n{context}"
        return {**body, "instructions": joined}
    messages = list(body.get("messages") or [])
    at = 0
    while at < len(messages) and isinstance(messages[at], dict) and messages[at].get("role") in ("system",
                                                                                               "developer"):
        at += 1
    messages.insert(at, {"role": "system", "content": context})
    return {**body, "messages": messages}


# -- the answer ---------------------------------------------------------------------

def _citations(text: str, hits: Sequence[Hit]) -> list[dict[str, Any]]:
    """A file_citation for each [n] in the text naming one of the passages, at the mark's end."""
    found = []
    for mark in _MARK.finditer(text):
        n = int(mark.group(1))
        if 1 <= n <= len(hits):
            passage = hits[n - 1].passage
            found.append({"type": "file_citation", "index": mark.end(), "file_id": passage.file_id,
                          "filename": passage.filename})
    return found


def _result(hit: Hit) -> dict[str, Any]:
    p = hit.passage
    return {"file_id": p.file_id, "filename": p.filename, "score": round(hit.score, 6),
            "attributes": p.attributes or None, "text": p.text}


def annotate(api: str, answer: dict[str, Any], retrieved: Retrieved) -> dict[str, Any]:
    """The whole answer with where it came from: responses' file_search_call and file_citation annotations."""
    hits = retrieved.hits
    if api == "responses" and isinstance(answer.get("output"), list):
        output = []
        for item in answer["output"]:
            if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
                item = {**item, "content": [
                    {**part, "annotations": [*(part.get("annotations") or []), *_citations(part["text"], hits)]}
                    if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(
                        part.get("text"), str) else part for part in item["content"]]}
            output.append(item)
        call = {"id": "fs_" + secrets.token_hex(12), "type": "file_search_call", "status": "completed",
                "queries": [retrieved.query] if retrieved.query else [],
                "results": [_result(h) for h in hits] if retrieved.with_results else None}
        return {**answer, "output": [call, *output]}
    if api == "chat" and isinstance(answer.get("choices"), list):
        choices = []
        for choice in answer["choices"]:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                message = {**message, "annotations": [*(message.get("annotations") or []),
                                                      *_citations(message["content"], hits)]}
                choice = {**choice, "message": message}
            choices.append(choice)
        return {**answer, "choices": choices}
    return answer


def cited_event(api: str, answer: dict[str, Any] | None, retrieved: Retrieved) -> bytes:
    """A streamed chat answer's last chunk before [DONE]: the file_citation annotations of its whole text.

    b"" for any other API (a /v1/responses stream's response.completed is annotated whole instead), for an
    answer that did not come whole, and for one that cites nothing.
    """
    if api != "chat" or answer is None:
        return b""
    choices = []
    for choice in answer.get("choices") or []:
        text = (choice.get("message") or {}).get("content")
        cited = _citations(text, retrieved.hits) if isinstance(text, str) else []
        if cited:
            choices.append({"index": choice.get("index", 0), "delta": {"annotations": cited}, "finish_reason": None})
    if not choices:
        return b""
    chunk = {"id": answer.get("id"), "object": "chat.completion.chunk", "created": answer.get("created"),
             "model": answer.get("model"), "choices": choices}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"
