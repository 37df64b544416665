"""What each replica of a model holds of a request's prompt, for the `prefix` scorer (docs/routing.md).

Worked out only where it can matter: a profile that weighs `prefix`, more than one replica, a model whose
tokenizer the router has, and an index that has heard from an engine cutting blocks of a known size. The prompt
is the body the engine is about to get (after the guardrails' redaction, for the model actually served), so
its tokens are the engine's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from llmgw.router.prefixindex import prompt_blocks
from llmgw.router.registry import ModelEntry, Registry
from llmgw.router.scheduler import profiles

log = logging.getLogger("llmgw.router")
_said: set[str] = set()  # models whose tokenizer failed, said once each

# Past this many characters a prompt is cut into tokens off the event loop (a 100,000-token prompt takes
# tens of milliseconds); below, the thread's hand-over costs more than the work.
INLINE_CHARS = 20_000


def weighs_prefix(profile: str) -> bool:
    found = profiles().get(profile)
    return found is not None and any(name == "prefix" and weight for name, weight in found.weights)


async def cached_prefix(registry: Registry, entry: ModelEntry, body: dict[str, Any],
                        profile: str) -> tuple[int, dict[str, int]]:
    """(the prompt's blocks, endpoint id -> how many of them its engine holds from the start)."""
    if not entry.tokenizer or not weighs_prefix(profile):
        return 0, {}  # every request of every other profile or model stops here, having built nothing
    replicas = {e.replica: e.id for e in entry.endpoints if e.replica}
    if len(replicas) < 2:
        return 0, {}
    block_size = registry.prefix.block_size(replicas)
    tokens = registry.prompt_tokens(entry) if block_size else None
    if tokens is None:
        return 0, {}
    messages, prompt = body.get("messages"), body.get("prompt")
    if isinstance(messages, list):
        size = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        cut: Callable[[], list[int]] = functools.partial(tokens.chat, messages, body.get("tools"))
    elif isinstance(prompt, str):
        size, cut = len(prompt), functools.partial(tokens.text, prompt)
    else:
        return 0, {}
    try:
        ids = await asyncio.to_thread(cut) if size > INLINE_CHARS else cut()
    except Exception:  # a template or tokenizer that fails never fails the request
        if entry.name not in _said:
            _said.add(entry.name)
            log.exception("%s: its prompt could not be cut into tokens; routed without its cache", entry.name)
        return 0, {}
    blocks = prompt_blocks(ids, block_size)
    matched = registry.prefix.matched(blocks)
    return len(blocks), {replicas[shard]: n for shard, n in matched.items() if shard in replicas}
