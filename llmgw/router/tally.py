"""What one answer costs, and how much of it reached the client, however the answer ended.

The engine's usage event is the bill when it comes. It comes last, so a
stream the engine cuts (or an engine that never sends usage) leaves the
router to count for itself. Before this module each API counted its own
way: a chat stream cut under an output guardrail billed the events it had
seen less one, though the guardrail had held all their text back, while
/v1/messages and /v1/responses cut at the same moment billed nothing, and
all three billed 0 prompt tokens (issue 10, item 8). Now every API's stream
goes through one `Tally`:

- billed: the engine's usage when it came; otherwise the tokens the engine
  sent (one an event, as vLLM, SGLang, llama.cpp and the sim send them)
  and the prompt estimated from the request, each estimate named in the
  usage row's `detail.estimated`;
- delivered: the share of that answer that reached the client. A
  guardrail that reads the answer holds text until a sentence is whole;
  what it still held when the stream ended never reached the client.
  `detail.delivered_tokens` says so whenever it is less than was billed.

Nothing here touches the store or awaits: counts are kept on the call, and
its one usage row is written by the batch writer as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmgw.guard import reads
from llmgw.router.call import Call
from llmgw.router.wire import JSON

# A finish event ends a choice; its delta carries no token. The engines
# write compact JSON (vLLM, SGLang, llama.cpp, the sim); one that wrote
# Python's spaces would be billed one token more for a whole answer whose
# usage it did not send, which costs less than a third scan of every block.
_FINISH = b'"finish_reason":"'
# Template variables (enable_thinking …) steer the template; they are not prompt text.
_NOT_PROMPT = frozenset(("chat_template_kwargs",))


def token_events(block: bytes) -> int:
    """Token events in complete, unparsed stream events: those that are not a choice's finish.

    The hot path of an unread stream looks at bytes only; this is the same
    rule `chunk_tokens` applies to a parsed event.
    """
    # Two flat scans of the block: ~0.2 µs more than the one count this
    # replaced (a generator over patterns had cost 1.2 µs more).
    return block.count(b"data: {") - block.count(_FINISH)


def chunk_tokens(chunk: dict[str, Any]) -> int:
    """1 when a parsed chat.completion.chunk (or completions chunk) carries a token, else 0."""
    choices = chunk.get("choices")
    if not choices or not isinstance(choices, list):
        return 0
    return 0 if any(isinstance(c, dict) and c.get("finish_reason") for c in choices) else 1


def answer_chars(chunks: Iterable[dict[str, Any]]) -> int:
    """Characters of answer text in chunks: content, reasoning, tool arguments, completions' text."""
    total = 0
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            if isinstance(text, str):
                total += len(text)
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            for field in ("content", "reasoning_content", "reasoning"):
                if isinstance(delta.get(field), str):
                    total += len(delta[field])
            for call in delta.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    total += len(function["arguments"])
    return total


def estimate_prompt_tokens(body: dict[str, Any], api: str) -> int:
    """The prompt's tokens as an engine would count them, about four characters a token; never 0.

    Read from the body sent to the engine (chat, or completions), so a
    question asked through /v1/messages or /v1/responses is estimated the
    same as the chat request it became. Every string the engine reads is
    counted (guard.reads lists them for the input scan); token ids count
    one each.
    """
    shape = api if api in ("completions", "embeddings") else "chat"
    chars = 0
    for text in reads.texts(body, shape):
        for path, piece in text.pieces:
            if path and path[0] in _NOT_PROMPT:
                continue
            chars += len(piece)
    ids = 0
    prompt = body.get({"completions": "prompt", "embeddings": "input"}.get(shape, ""))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        ids = len(prompt)
    elif isinstance(prompt, list):
        ids = sum(len(p) for p in prompt if isinstance(p, list))
    return max(1, (chars + 3) // 4 + ids)


class Tally:
    """The counts of one streamed answer, fed as its events pass and settled once at its end."""

    def __init__(self, call: Call, held: bool = False):
        self.call = call
        # A guardrail reads the answer and may hold or remove text: only
        # then are characters counted, on their way in and out of it.
        self.held = held
        self.usage = False  # the engine's own usage event came
        self.produced = 0  # token events the engine sent
        self.produced_chars = 0  # of answer text, counted when held
        self.released_chars = 0  # of that, what the guardrail passed on to the client
        self.settled = False

    def engine_usage(self, usage: dict[str, Any] | None) -> None:
        if usage:
            read_usage(self.call, usage)
            self.usage = True

    def raw(self, block: bytes) -> None:
        """Complete events passed on as they came, unparsed."""
        self.produced += token_events(block)

    def chunk(self, chunk: dict[str, Any]) -> None:
        """One parsed engine event, before a guardrail (if any) has had its say."""
        self.produced += chunk_tokens(chunk)
        if self.held:
            self.produced_chars += answer_chars((chunk,))

    def released(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What a guardrail passes on in an engine event's place; returned as given."""
        self.released_chars += answer_chars(chunks)
        return chunks

    def delivered(self, completion: int) -> int:
        """Completion tokens that reached the client: the share of the answer's text released."""
        if not self.held or _whole_delivery(self.call):
            return completion
        if self.released_chars >= self.produced_chars or self.produced_chars == 0:
            return completion
        return min(completion, round(completion * self.released_chars / self.produced_chars))

    def settle(self) -> None:
        """The answer is over, however it ended: fill in what the engine's usage did not say. Once only."""
        if self.settled:
            return
        self.settled = True
        call = self.call
        estimated = []
        if not self.usage:
            call.completion_tokens = self.produced
            estimated.append("completion_tokens")
        if not call.prompt_tokens:
            call.prompt_tokens = estimate_prompt_tokens(call.upstream_body, call.api)
            estimated.append("prompt_tokens")
        call.estimated = tuple(estimated)
        call.delivered_tokens = self.delivered(call.completion_tokens)


def read_usage(call: Call, usage: JSON | None) -> None:
    """An engine's usage object onto the call: what it says it read and wrote."""
    if not usage:
        return
    call.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    call.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    call.cached_tokens = int(details.get("cached_tokens") or 0)


def settle_whole(call: Call, answer: Any, delivered: Any) -> None:
    """A whole (not streamed) answer: the engine's usage, a prompt estimate without it, and what was sent.

    `delivered` is the answer as the client gets it (after a guardrail);
    text a guardrail's block removed is billed but was not delivered.
    """
    usage = answer.get("usage") if isinstance(answer, dict) else None
    read_usage(call, usage if isinstance(usage, dict) else None)
    estimated = []
    if not call.prompt_tokens:
        call.prompt_tokens = estimate_prompt_tokens(call.upstream_body, call.api)
        estimated.append("prompt_tokens")
    if not isinstance(usage, dict) and call.api != "embeddings":
        # No count from the engine: its text, about four characters a token.
        call.completion_tokens = (_whole_chars(answer) + 3) // 4
        estimated.append("completion_tokens")
    call.estimated = tuple(estimated)
    made, sent = _whole_chars(answer), _whole_chars(delivered)
    if made and sent < made and not _whole_delivery(call):
        call.delivered_tokens = round(call.completion_tokens * sent / made)
    else:
        call.delivered_tokens = call.completion_tokens


def _whole_delivery(call: Call) -> bool:
    """The answer reached its end and no guardrail stopped it: all of it was delivered.

    Its characters are no measure then: a redacted value's placeholder is
    shorter than the value, a restored one longer.
    """
    return call.status == 200 and (call.checker is None or call.checker.stopped is None)


def _whole_chars(answer: Any) -> int:
    if not isinstance(answer, dict):
        return 0
    total = 0
    for choice in answer.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            total += len(choice["text"])
        message = choice.get("message")
        if isinstance(message, dict):
            total += answer_chars(({"choices": [{"delta": message}]},))
    return total
