"""What the router works out of a request's prompt for the `prefix` scorer, against the index of cached blocks."""

from __future__ import annotations

import json

from llmgw.config import ModelSettings
from llmgw.protocol import CachedBlocks
from llmgw.router.cacheaware import cached_prefix
from llmgw.router.endpoint import Endpoint
from llmgw.router.prefixindex import prompt_blocks
from llmgw.router.prompttokens import PromptTokens
from llmgw.router.registry import ModelEntry, Registry
from tests.fixtures.tinyllama import write_tiny_llama

SYSTEM = " ".join(["The sun is shining and the sky is blue."] * 10)


def model(tokenizer: str) -> ModelEntry:
    entry = ModelEntry(ModelSettings(name="tiny"), tokenizer=tokenizer)
    entry.endpoints = [Endpoint(id=f"tiny/r{n}", model="tiny", url=f"http://127.0.0.1:{9000 + n}/v1",
                                upstream_model="tiny", replica=f"r{n}") for n in (1, 2)]
    return entry


async def test_each_replica_is_credited_with_the_blocks_of_the_prompt_its_engine_holds(tmp_path):
    write_tiny_llama(tmp_path)
    registry, entry = Registry(), model(str(tmp_path))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello"}]
    blocks = prompt_blocks(PromptTokens(tmp_path).chat(messages), 16)
    registry.cached_blocks(CachedBlocks("r2", 16, added=blocks[:3]))

    total, cached = await cached_prefix(registry, entry, {"messages": messages}, "prefix-cache")

    assert total == len(blocks) > 3 and cached == {"tiny/r2": 3}
    # A profile that does not weigh the prefix costs nothing: no tokenizer is even read.
    assert await cached_prefix(registry, entry, {"messages": messages}, "chat") == (0, {})


async def test_a_chat_template_that_fails_routes_the_request_without_its_cache(tmp_path):
    write_tiny_llama(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0].content + 1 }}"  # a TypeError, not a TemplateError
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    registry, entry = Registry(), model(str(tmp_path))
    registry.cached_blocks(CachedBlocks("r1", 16, added=[1, 2, 3]))

    assert await cached_prefix(registry, entry, {"messages": [{"role": "user", "content": "Hi"}]},
                               "prefix-cache") == (0, {})


async def test_a_model_whose_tokenizer_cannot_be_read_is_routed_without_its_cache(tmp_path):
    registry, entry = Registry(), model(str(tmp_path / "nowhere"))
    registry.cached_blocks(CachedBlocks("r1", 16, added=[1, 2, 3]))
    assert await cached_prefix(registry, entry, {"prompt": "Hi"}, "prefix-cache") == (0, {})
