"""What a model can do, and what a request asks of it.

A request a model cannot serve used to reach its replica: embeddings sent to
a chat-only llama.cpp model came back 501, and while the breaker counted
those, chat on the same model was refused for ~30 s (issue 11, item 2). So a
model says what it does — from its catalog entry or settings, else from its
engine — clients read it in /v1/models, and the router refuses a request for
anything else with 400 before any replica is asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

Capability = Literal["chat", "completions", "embeddings", "vision", "tools", "thinking", "images", "workflows"]
CAPABILITIES: tuple[str, ...] = ("chat", "completions", "embeddings", "vision", "tools", "thinking", "images",
                                 "workflows")

# What a model on each engine does unless its entry says otherwise. Vision is
# left out of the language engines: it needs a multimodal model (and, for
# llama.cpp, its projector), and an image sent to a text model fails in the
# engine. Thinking is in: a model that does not think answers without it.
# The sim answers every endpoint and part of a language model's, so tests can ask for anything of one; pictures
# and workflows are ComfyUI's (a ComfyUI model making pictures does images too: PICTURES).
_LANGUAGE = ("chat", "completions", "tools", "thinking")
ENGINE_DEFAULTS: Mapping[str, tuple[str, ...]] = {
    "llamacpp": _LANGUAGE, "vllm": _LANGUAGE, "sglang": _LANGUAGE, "trtllm": _LANGUAGE,
    "strata": _LANGUAGE, "freetoken": _LANGUAGE,
    "comfyui": ("workflows",),
    "sim": ("chat", "completions", "embeddings", "vision", "tools", "thinking"),
}
PICTURES = ("images", "workflows")
# An embedding model (role: embedding) serves /v1/embeddings and nothing else.
EMBEDDING = ("embeddings",)


def ordered(names: Iterable[str]) -> tuple[str, ...]:
    """`names` in the one order every list of capabilities is shown in."""
    have = set(names)
    return tuple(c for c in CAPABILITIES if c in have)


def duplicate(names: Iterable[str]) -> str | None:
    """A capability named twice, for the refusal of a model's settings."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def for_catalog(declared: list[str], engines: Iterable[str], role: str, output: str = "") -> tuple[str, ...]:
    """A catalog model's capabilities: as declared, else what every engine of its profiles does.

    Only what all its profiles do counts, since a request may land on a
    replica of any of them. `output` is what a ComfyUI model makes: one
    making pictures answers /v1/images/generations too.
    """
    if declared:
        return ordered(declared)
    if role == "embedding":
        return EMBEDDING
    if output == "pictures":
        return PICTURES
    common = set(CAPABILITIES)
    for engine in engines:
        common &= set(ENGINE_DEFAULTS.get(engine, CAPABILITIES))
    return ordered(common)


def _words(names: Iterable[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def refusal(model: str, can: tuple[str, ...], wanted: str) -> str:
    """The sentence a request for `wanted` gets from a model that does only `can`."""
    does = f"{model} does {_words(can)}, not {wanted}" if can else f"{model} does none of {_words(CAPABILITIES)}"
    return (f"{does}; send {wanted} requests to a model that lists \"{wanted}\" in its capabilities "
            "(GET /v1/models shows them)")
