"""What a model can do, from its catalog entry or its engine, and what a request asks of it (issue 11, item 2)."""

from __future__ import annotations

import pytest

from llmgw.config.router import ModelSettings
from llmgw.control.catalog import Entry
from llmgw.control.catalog.spec import SpecError, load_spec
from llmgw.control.routes import Routes, from_doc, placed_models, to_doc
from llmgw.router.call import Refuse
from llmgw.router.capability import check, needs
from llmgw.router.registry import ModelEntry
from llmgw.router.translate import anthropic as anth
from llmgw.router.translate import responses as resp_api
from llmgw.store import CatalogModel

LANGUAGE = ("chat", "completions", "tools", "thinking")


def _spec(**doc):
    profiles = doc.pop("engines", ["llamacpp"])
    return load_spec({"name": "qwen", "source": "/m/qwen.gguf",
                      "profiles": [{"engine": e, "cpu_cores": 1, "memory": "1GB"} for e in profiles], **doc})


def test_a_catalog_model_does_what_its_engine_does_unless_it_says():
    assert _spec().can() == LANGUAGE
    assert _spec(engines=["sim"]).can() == ("chat", "completions", "embeddings", "vision", "tools", "thinking")
    assert _spec(role="embedding").can() == ("embeddings",)
    assert _spec(capabilities=["vision", "chat"]).can() == ("chat", "vision")


def test_a_model_of_several_engines_does_only_what_every_one_of_them_does():
    # A request may land on a replica of any profile.
    assert _spec(engines=["sim", "llamacpp"]).can() == LANGUAGE


def test_a_capability_that_is_not_one_is_refused_naming_the_ones_there_are():
    with pytest.raises(SpecError) as refused:
        _spec(capabilities=["chat", "embedings"])
    assert str(refused.value) == ("capabilities[1]: expected one of chat|completions|embeddings|vision|tools|"
                                  'thinking|images|workflows, got "embedings"')
    with pytest.raises(SpecError, match="capabilities: chat is given twice"):
        _spec(capabilities=["chat", "chat"])


def test_capabilities_reach_every_alias_and_cross_to_workers_and_standbys():
    entry = Entry.from_record(CatalogModel("qwen", {**_spec(aliases=["q"]).to_doc()}))
    placed = placed_models([entry], [], "k")
    assert placed["q"].settings.can == LANGUAGE
    back = from_doc(to_doc(Routes(placed)), "k")
    assert back.placed["qwen"].settings.can == LANGUAGE


def test_a_model_from_the_settings_with_none_set_does_everything_but_run_workflows():
    # Workflows are ComfyUI's: only a model with a comfyui block runs them.
    assert ModelSettings(name="remote").can == ("chat", "completions", "embeddings", "vision", "tools", "thinking",
                                                "images")


def test_an_anthropic_image_and_thinking_ask_for_vision_and_thinking():
    body = {"model": "qwen", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "What is this?"}]}]}
    upstream = anth.messages_to_chat(body, upstream_model="qwen", thinking_mode="")
    assert [c for c, _ in needs("messages", body, upstream)] == ["chat", "vision", "thinking"]


def test_a_responses_reasoning_effort_asks_for_thinking_and_none_does_not():
    body = {"model": "qwen", "input": "Hi", "reasoning": {"effort": "high"}}
    assert ("thinking", "reasoning_effort") in needs("responses", body, resp_api.responses_to_chat(body,
                                                                                             upstream_model="qwen"))
    body = {"model": "qwen", "input": "Hi", "reasoning": {"effort": "none"}}
    assert [c for c, _ in needs("responses", body, resp_api.responses_to_chat(body, upstream_model="qwen"))] == ["chat"]


def test_a_request_for_what_a_model_does_not_do_gets_400_naming_what_it_does():
    entry = ModelEntry(ModelSettings(name="qwen", capabilities=["chat", "completions"]))
    with pytest.raises(Refuse) as refused:
        check(entry, "embeddings", {"input": "hi"}, {"input": "hi"})
    assert (refused.value.status, refused.value.code) == (400, "unsupported_capability")
    assert refused.value.message == ('qwen does chat and completions, not embeddings; send embeddings requests to a '
                                     'model that lists "embeddings" in its capabilities (GET /v1/models shows them)')
    check(entry, "completions", {"prompt": "hi"}, {"prompt": "hi"})
