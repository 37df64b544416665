"""The whole answer built from an engine's stream, so a streamed answer can be kept in the answer cache.

It reads the events the relay passes on, with the relay's own reader
(llmgw.router.sse), and keeps a stream only when it ended whole.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.router import sse
from llmgw.router.wire import JSON


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
        self._usage: JSON | None = None
        self.failed = False
        self.done = False
        self.bytes = 0

    def feed_sse(self, block: bytes) -> None:
        for payload in sse.payloads(block):
            if payload == sse.DONE:
                self.done = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.failed = True
                continue
            self.feed(chunk)

    def feed(self, chunk: JSON) -> None:
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

    def _choice(self, choice: JSON) -> None:
        index = choice.get("index", 0)
        state = self._choices.setdefault(index, {"text": [], "reasoning": [], "reasoning_key": None,
                                                 "role": None, "tools": {}, "finish": None})
        if self._object == "text_completion":
            if isinstance(choice.get("text"), str):
                state["text"].append(choice["text"])
                self.bytes += len(choice["text"])
        else:
            delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            if delta.get("role"):
                state["role"] = delta["role"]
            if isinstance(delta.get("content"), str):
                state["text"].append(delta["content"])
                self.bytes += len(delta["content"])
            for name in ("reasoning_content", "reasoning"):
                # vLLM sent both names for a while; keep the first one seen.
                if isinstance(delta.get(name), str) and delta[name] and state["reasoning_key"] in (None, name):
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
                function: dict[str, Any] = piece["function"] if isinstance(piece.get("function"), dict) else {}
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

    def answer(self, *, require_done: bool = True) -> JSON | None:
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
