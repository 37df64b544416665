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

from llmgw.guard import OutputChecker


def guard_answer(checker: OutputChecker, answer: dict[str, Any]) -> dict[str, Any]:
    """A whole (not streamed) chat completion, checked; the caller's dict is not changed."""
    choices = []
    for choice in answer.get("choices") or []:
        index = choice.get("index", 0)
        if "message" not in choice and isinstance(choice.get("text"), str):
            # /v1/completions: the answer is the choice's text.
            text = checker.whole(choice["text"], _ch(index, "content"))
            stopped = checker.stopped is not None
            choices.append({**choice, "text": "" if stopped else text,
                            "finish_reason": "content_filter" if stopped else choice.get("finish_reason")})
            continue
        message = dict(choice.get("message") or {})
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


async def guard_whole(checker: OutputChecker, answer: dict[str, Any]) -> dict[str, Any]:
    """guard_answer, then the judge and services on the whole answer (when the policy has them)."""
    checked = guard_answer(checker, answer)
    if checker.review is None or checker.stopped is not None:
        return checked
    await checker.finish_review()
    if checker.stopped is None:
        return checked
    return {**checked, "choices": [
        {**c, **({"text": ""} if "message" not in c else {"message": {"role": "assistant", "content": ""}}),
         "finish_reason": "content_filter"} for c in checked.get("choices") or []]}


class ChunkGuard:
    """Rewrites a stream's chat.completion.chunk events through an OutputChecker.

    With a judge or a service reading the answer (`checker.review`), the
    chunk that ends a choice is held back by `rewrite` and finished by
    `arewrite`, which awaits their last word before the answer's end (or a
    content_filter stop) is sent. Streams go through `arewrite` then.
    """

    def __init__(self, checker: OutputChecker):
        self.checker = checker
        self.finished = False  # a content_filter stop has been sent
        self.awaits = checker.review is not None  # the stream must use arewrite
        self._ending: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (chunk, choice) held by rewrite
        self._text = False  # the stream is /v1/completions' (choices carry text) rather than chat's
        self._fed: dict[int, str] = {}  # choice index -> the channel its last delta fed

    async def arewrite(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """rewrite(), and when the chunk ends the answer: the review's last word, then the end or a stop."""
        out = self.rewrite(chunk)
        if not self._ending or self.finished:
            return out
        ending, self._ending = self._ending, []
        first, choice = ending[0]
        index = choice.get("index", 0)
        rest = self.checker.flush()
        if self.checker.stopped is None:
            await self.checker.finish_review()
        if self.checker.stopped is not None:
            self.finished = True
            return out + [self._stop(first, index)]
        out.extend(self._rest(first, index, rest))
        out.extend({**{k: v for k, v in c.items() if k != "usage"}, "choices": [ch]} for c, ch in ending)
        return out

    def rewrite(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks to pass on in this one's place (none, it, or a flushed one before it)."""
        if self.finished:
            return []
        choices = chunk.get("choices")
        if self.awaits and self.checker.poll():
            # A judgment in the background objected to what was released.
            self.finished = True
            index = choices[0].get("index", 0) if choices else 0
            return [self._stop(chunk, index)]
        if not choices:
            return [chunk]  # the usage event, or an engine's error event
        out: list[dict[str, Any]] = []
        rebuilt = []
        for choice in choices:
            index = choice.get("index", 0)
            if "delta" not in choice and isinstance(choice.get("text"), str):
                self._text = True  # a /v1/completions stream: each choice carries text, not a delta
                choice = {**choice, "text": self.checker.feed(choice["text"], _ch(index, "content"))}
            else:
                given = choice.get("delta") or {}
                out.extend(self._switched(chunk, index, given))
                if self.checker.stopped is not None:
                    self.finished = True
                    return out + [self._stop(chunk, index)]
                choice = {**choice, "delta": self._delta(given, index)}
            finish = choice.get("finish_reason")
            if self.checker.stopped is not None:
                self.finished = True
                return out + [self._stop(chunk, index)]
            if finish is not None and self.awaits:
                # Its text goes now; its end waits for arewrite and the review's last word.
                self._ending.append((chunk, self._end(index, finish)))
                rebuilt.append({**choice, "finish_reason": None})
                continue
            if finish is not None:
                out.extend(self._flushed(chunk, index))
                if self.checker.stopped is not None:
                    self.finished = True
                    return out + [self._stop(chunk, index)]
            rebuilt.append(choice)
        out.append({**chunk, "choices": rebuilt})
        return out

    def _switched(self, chunk: dict[str, Any], index: int, delta: dict[str, Any]) -> list[dict[str, Any]]:
        """What was held of the channel the answer has just left (reasoning, text, a tool call), sent before the new
        one begins.

        Each channel is held on its own (a sentence at a time, a tool call's
        arguments whole), and a tool call's name passes at once. Released
        only at the end, the held rest of the thinking came after the call's
        name, and the Anthropic and Responses translations, whose blocks
        follow one another, closed the call to open the thinking again and
        lost its arguments: Claude Code got every tool call with an empty
        input (issue 25, item 22). The engines finish one channel before the
        next begins, so the switch is where the rest belongs.
        """
        channels = _channels(delta, index)
        if not channels:
            return []
        last, self._fed[index] = self._fed.get(index), channels[-1]
        if last is None or last == channels[0]:
            return []
        return self._flushed(chunk, index)

    def _delta(self, given: dict[str, Any], index: int) -> dict[str, Any]:
        """A chat chunk's delta with its strings through the checker: content, reasoning, tool arguments."""
        delta = dict(given)
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
        return delta

    def _end(self, index: int, finish: str) -> dict[str, Any]:
        if self._text:
            return {"index": index, "text": "", "finish_reason": finish}
        return {"index": index, "delta": {}, "finish_reason": finish}

    def _flushed(self, chunk: dict[str, Any], index: int) -> list[dict[str, Any]]:
        return self._rest(chunk, index, self.checker.flush())

    def _rest(self, chunk: dict[str, Any], index: int, rest: dict[str, str]) -> list[dict[str, Any]]:
        if not rest:
            return []
        if self._text:
            text = "".join(rest.values())
            return [{**chunk, "choices": [{"index": index, "text": text, "finish_reason": None}]}]
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

    def _stop(self, chunk: dict[str, Any], index: int) -> dict[str, Any]:
        return {**chunk, "choices": [self._end(index, "content_filter")]}


def _channels(delta: dict[str, Any], index: int) -> list[str]:
    """The channels a chat delta feeds, in the order the engines send them: thinking, text, tool calls."""
    names = []
    if any(isinstance(delta.get(f), str) and delta[f] for f in ("reasoning_content", "reasoning")):
        names.append(_ch(index, "reasoning"))
    if isinstance(delta.get("content"), str) and delta["content"]:
        names.append(_ch(index, "content"))
    for call in delta.get("tool_calls") or ():
        if isinstance(call, dict):
            names.append(_ch(index, f"tool:{call.get('index', 0)}"))
    return names


def encode_chunks(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
