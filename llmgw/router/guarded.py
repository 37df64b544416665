"""Answers read by a guardrail policy on their way to the client.

Only used when a policy reads the answer or restores redacted values; any
other answer is relayed untouched. Each engine event is parsed once, its
strings handed to the policy's OutputChecker, and the event rebuilt with
what may be sent now: restored placeholders, redacted values, text held
back until a sentence is whole. A block stops the answer with
finish_reason `content_filter`.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.guard.gate import OutputChecker


def guard_answer(checker: OutputChecker, answer: dict[str, Any]) -> dict[str, Any]:
    """A whole (not streamed) chat completion, checked; the caller's dict is not changed."""
    choices = []
    for choice in answer.get("choices") or []:
        message = dict(choice.get("message") or {})
        index = choice.get("index", 0)
        if isinstance(message.get("content"), str):
            message["content"] = checker.whole(message["content"], _ch(index, "content"))
        for field in ("reasoning_content", "reasoning"):
            if isinstance(message.get(field), str):
                message[field] = checker.whole(message[field], _ch(index, "reasoning"))
        calls = []
        for i, call in enumerate(message.get("tool_calls") or []):
            function = dict(call.get("function") or {})
            if isinstance(function.get("arguments"), str):
                function["arguments"] = checker.whole(function["arguments"], _ch(index, f"tool:{i}"))
            calls.append({**call, "function": function})
        if calls:
            message["tool_calls"] = calls
        finish = choice.get("finish_reason")
        if checker.stopped is not None:
            message = {"role": "assistant", "content": ""}
            finish = "content_filter"
        choices.append({**choice, "message": message, "finish_reason": finish})
    return {**answer, "choices": choices}


def _ch(index: int, name: str) -> str:
    return name if index == 0 else f"{index}:{name}"


class ChunkGuard:
    """Rewrites a stream's chat.completion.chunk events through an OutputChecker."""

    def __init__(self, checker: OutputChecker):
        self.checker = checker
        self.finished = False  # a content_filter stop has been sent

    def rewrite(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks to pass on in this one's place (none, it, or a flushed one before it)."""
        if self.finished:
            return []
        choices = chunk.get("choices")
        if not choices:
            return [chunk]  # the usage event, or an engine's error event
        out: list[dict[str, Any]] = []
        rebuilt = []
        for choice in choices:
            index = choice.get("index", 0)
            delta = dict(choice.get("delta") or {})
            if isinstance(delta.get("content"), str):
                delta["content"] = self.checker.feed(delta["content"], _ch(index, "content"))
            for field in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(field), str):
                    delta[field] = self.checker.feed(delta[field], _ch(index, "reasoning"))
            if delta.get("tool_calls"):
                calls = []
                for call in delta["tool_calls"]:
                    function = dict(call.get("function") or {})
                    if isinstance(function.get("arguments"), str):
                        function["arguments"] = self.checker.feed(
                            function["arguments"], _ch(index, f"tool:{call.get('index', 0)}"))
                    calls.append({**call, "function": function})
                delta["tool_calls"] = calls
            finish = choice.get("finish_reason")
            if self.checker.stopped is not None:
                self.finished = True
                return out + [self._stop(chunk, index)]
            if finish is not None:
                out.extend(self._flushed(chunk, index))
                if self.checker.stopped is not None:
                    self.finished = True
                    return out + [self._stop(chunk, index)]
            rebuilt.append({**choice, "delta": delta})
        out.append({**chunk, "choices": rebuilt})
        return out

    def _flushed(self, chunk: dict[str, Any], index: int) -> list[dict[str, Any]]:
        rest = self.checker.flush()
        if not rest:
            return []
        delta: dict[str, Any] = {}
        calls = []
        for name, text in rest.items():
            name = name.split(":", 1)[1] if name[:1].isdigit() else name
            if name == "content":
                delta["content"] = text
            elif name == "reasoning":
                delta["reasoning_content"] = text
            elif name.startswith("tool:"):
                calls.append({"index": int(name.split(":")[1]), "function": {"arguments": text}})
        if calls:
            delta["tool_calls"] = calls
        return [{**chunk, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}]

    @staticmethod
    def _stop(chunk: dict[str, Any], index: int) -> dict[str, Any]:
        return {**chunk, "choices": [{"index": index, "delta": {}, "finish_reason": "content_filter"}]}


def encode_chunks(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
