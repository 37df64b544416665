"""The caller's guardrail policies, read both ways around a tool call.

The same policies and the same reading as a prompt on /v1 (llmgw.guard.gate,
through the router's per-key policy cache): the arguments before they
leave, since whatever a tool is given reaches a company system; and the
tool's answer as the prompt it becomes, since an agent hands it to a model
next. Both are read with the policy's input rules: an instruction planted
in a ticket is an injection as a pasted one is, and personal data in an
answer is redacted (or refused) before the agent has it.

The judge and outside services are not asked here: a tool call is answered
in the caller's time, and the patterns catch what a pasted secret and a
planted instruction look like.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.account import Principal
from llmgw.guard import EffectivePolicy, check_input
from llmgw.mcp.plane import McpPlane


class GuardRefusal(Exception):
    """A policy refused the text: the sentence names the rule, never what it found."""


class Guarding:
    def __init__(self, plane: McpPlane):
        self.plane = plane

    def _policy(self, principal: Principal) -> EffectivePolicy | None:
        settings = self.plane.settings.current.guard
        if not settings.enabled or not (settings.default or settings.attach):
            return None
        return self.plane.router.guards.effective(settings, self.plane.settings.version, principal)

    def arguments(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as they may leave: as given, redacted, or GuardRefusal."""
        policy = self._policy(principal)
        if policy is None or not policy.input.active:
            return arguments
        text = orjson.dumps(arguments).decode()
        out = _read(policy, [{"role": "user", "content": text}])
        if out[0] == text:
            return arguments
        try:
            changed = orjson.loads(out[0])
        except orjson.JSONDecodeError:
            raise GuardRefusal("the policy redacted a value that cannot be taken out of the arguments whole "
                               "(rule redact)") from None
        return changed if isinstance(changed, dict) else arguments

    def answer(self, principal: Principal, result: dict[str, Any]) -> dict[str, Any]:
        """The tool's answer as the agent may have it: as given, redacted, or GuardRefusal."""
        policy = self._policy(principal)
        if policy is None or not policy.input.active:
            return result
        content = list(result.get("content") or [])
        places = [i for i, item in enumerate(content) if isinstance(item, dict) and isinstance(item.get("text"), str)]
        structured = result.get("structuredContent")
        texts = [content[i]["text"] for i in places]
        if structured is not None:
            texts.append(orjson.dumps(structured).decode())
        if not texts:
            return result
        out = _read(policy, [{"role": "tool", "content": t} for t in texts])
        if out == texts:
            return result
        for i, text in zip(places, out, strict=False):
            content[i] = {**content[i], "text": text}
        changed: dict[str, Any] = {**result, "content": content}
        if structured is not None:
            try:
                changed["structuredContent"] = orjson.loads(out[-1])
            except orjson.JSONDecodeError:
                changed.pop("structuredContent")  # its text in `content` carries the redacted values
        return changed


def _read(policy: EffectivePolicy, messages: list[dict[str, Any]]) -> list[str]:
    result = check_input(policy, {"messages": messages}, "chat")
    if result.refusal is not None:
        raise GuardRefusal(result.refusal.message)
    # The body without the policy's system prompt, which check_input puts first when there is one.
    sent = [m for m in result.body["messages"] if m.get("role") != "system"]
    return [m["content"] for m in sent]
