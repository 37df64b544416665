"""What a model on a Hugging Face hub is, read before it is fetched: the plan's ModelShape.

A GGUF file says it in its header, read from its first bytes (a ranged read); a safetensors checkpoint in
its config.json. The sizes come from the hub's listing at the commit the revision is now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.layouts import ModelShape
from llmgw.engines import gguf_metadata
from llmgw.errors import N_
from llmgw.hub import Hub, HubError, HubFile, RepoInfo, SourceError, parse_source

# A GGUF's keys come before its vocabulary: 16 MiB holds them in the files llama.cpp's tools write.
HEADER_BYTES = 16 << 20
CONFIG_BYTES = 1 << 20
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
# "30B-A3B": a model of experts named by its whole and its active part, as Qwen and others name them.
_ACTIVE = re.compile(r"(\d+(?:\.\d+)?)B-A(\d+(?:\.\d+)?)B", re.IGNORECASE)


@dataclass(frozen=True)
class Described:
    """A model's shape, and what it was read from."""

    shape: ModelShape
    repo: str
    commit: str
    files: tuple[str, ...]


async def describe_source(hub: Hub, source: str) -> Described:
    """The shape of `hf:org/repo/file.gguf` or of `hf:org/repo`'s safetensors checkpoint; a Refusal saying
    what to give instead where neither can be read."""
    try:
        hf = parse_source(source if source.startswith("hf:") else f"hf:{source}")
    except SourceError as e:
        raise Refusal(N_("{reason}"), 400, "invalid_source", params={"reason": str(e)}) from None
    try:
        info = await hub.repo(hf.repo_id, hf.revision)
        if hf.path:
            return await gguf_shape(hub, info, hf.path)
        return await checkpoint_shape(hub, info)
    except HubError as e:
        raise Refusal(N_("{reason}"), e.status, "hub", params={"reason": str(e)}) from None


async def gguf_shape(hub: Hub, info: RepoInfo, path: str, first: int = HEADER_BYTES) -> Described:
    """A GGUF's shape from the first `first` bytes of its header (its first part's, for a split one)."""
    if not path.lower().endswith(".gguf"):
        raise Refusal(N_("{path} is not a GGUF file; name one, or give hf:{repo} alone for its safetensors"),
                      400, "invalid_source", params={"path": path, "repo": info.repo_id})
    if path not in info.files:
        raise Refusal(N_("{repo} has no file {name} at {revision} (commit {commit}); its files: {listed}"), 404,
                      "not_found", params={"repo": info.repo_id, "name": path, "revision": info.commit,
                                           "commit": info.commit, "listed": _listed(info, ".gguf")})
    parts = _split_parts(info, path)
    meta = gguf_metadata(await hub.read(info.repo_id, info.commit, parts[0].path, first))
    arch = str(meta.get("general.architecture", ""))

    def number(key: str) -> int:
        value = meta.get(f"{arch}.{key}", 0)
        return value if isinstance(value, int) else 0

    layers, heads, kv_heads = number("block_count"), number("attention.head_count"), number("attention.head_count_kv")
    head_dim = number("attention.key_length") or (number("embedding_length") // heads if heads else 0)
    kv_heads = kv_heads or heads
    experts, used = number("expert_count"), number("expert_used_count")
    shape = ModelShape(weights_bytes=sum(p.size for p in parts), format="gguf", layers=layers, kv_heads=kv_heads,
                       kv_bytes_per_token=layers * kv_heads * head_dim * 2 * 2,
                       active_share=active_share(info.repo_id + "/" + path, experts, used),
                       trained_context=number("context_length"))
    return Described(shape, info.repo_id, info.commit, tuple(p.path for p in parts))


async def checkpoint_shape(hub: Hub, info: RepoInfo) -> Described:
    """A safetensors checkpoint's shape from its config.json."""
    weights = [f for name, f in sorted(info.files.items()) if name.endswith(".safetensors")]
    if not weights:
        ggufs = _listed(info, ".gguf")
        if ggufs != "none":
            raise Refusal(N_("{repo} holds GGUF files: name the one to plan, as hf:{repo}/FILE ({listed})"), 400,
                          "invalid_source", params={"repo": info.repo_id, "listed": ggufs})
        raise Refusal(N_("{repo} has neither GGUF nor safetensors weights, which is all llmgw serves (a pickle "
                         "format runs code as it loads)"), 400, "unsupported", params={"repo": info.repo_id})
    config: dict[str, Any] = {}
    if "config.json" in info.files:
        try:
            loaded = orjson.loads(await hub.read(info.repo_id, info.commit, "config.json", CONFIG_BYTES))
            config = loaded if isinstance(loaded, dict) else {}
        except orjson.JSONDecodeError:
            config = {}
    inner = config.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else config

    def number(*keys: str) -> int:
        for key in keys:
            value = text.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    layers = number("num_hidden_layers", "n_layer")
    heads = number("num_attention_heads", "n_head")
    kv_heads = number("num_key_value_heads") or heads
    head_dim = number("head_dim") or (number("hidden_size") // heads if heads else 0)
    experts = number("num_experts", "num_local_experts", "n_routed_experts")
    used = number("num_experts_per_tok", "moe_topk")
    given = config.get("quantization_config")
    quant: dict[str, Any] = given if isinstance(given, dict) else {}
    fp8 = str(quant.get("quant_method", "")).lower() == "fp8" or "fp8" in info.repo_id.lower()
    shape = ModelShape(weights_bytes=sum(f.size for f in weights), format="safetensors", layers=layers,
                       kv_heads=kv_heads, kv_bytes_per_token=layers * kv_heads * head_dim * 2 * 2,
                       active_share=active_share(info.repo_id, experts, used), fp8=fp8,
                       trained_context=number("max_position_embeddings"))
    return Described(shape, info.repo_id, info.commit, tuple(f.path for f in weights))


def _split_parts(info: RepoInfo, path: str) -> list[HubFile]:
    """A split GGUF's every part (-00001-of-00003.gguf …), whichever part was named; the file alone otherwise."""
    found = _SPLIT.search(path)
    if not found:
        return [info.files[path]]
    stem, count = path[: found.start()], int(found.group(2))
    names = [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [n for n in names if n not in info.files]
    if missing:
        raise Refusal(N_("{repo} lacks {name}, a part of the split GGUF {path}"), 404, "not_found",
                      params={"repo": info.repo_id, "name": missing[0], "path": path})
    return [info.files[n] for n in names]


def active_share(name: str, experts: int, used: int) -> float:
    """The part of a model of experts one token reads: from its name (30B-A3B) where it says, else the share of
    experts a token is routed to; 1 for a dense model."""
    named = _ACTIVE.search(name)
    if named and float(named.group(1)) > 0:
        return min(1.0, float(named.group(2)) / float(named.group(1)))
    if experts > 1 and used > 0:
        return min(1.0, used / experts)
    return 1.0


def _listed(info: RepoInfo, suffix: str) -> str:
    names = [n for n in sorted(info.files) if n.lower().endswith(suffix)]
    return ", ".join(names[:12]) or "none"
