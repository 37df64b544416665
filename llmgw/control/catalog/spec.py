"""A catalog model as a person writes it (`llmgw ctl model add -f FILE`), and what its replicas run.

Loaded with the configuration loader (llmgw.config.loader), so a model file
is as strict as server.yaml: an unknown key is refused with the nearest
known one, a wrong value with the form expected, and every message names
the key's path ("profiles[0].gpus.count: expected a whole number").

    name: qwen-7b
    source: hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf
    sha256: 3f1c…
    context_length: 8192
    profiles:
      - engine: llamacpp
        cpu_cores: 4
        memory: 8GB
    scaling: {min: 1, max: 2}

Profiles are alternatives, best first: a replica runs on the first whose
needs some node meets (cards, then CPUs, say).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from llmgw.config import (
    KNOWN_ENGINES,
    Capability,
    ComfyUIModel,
    ConfigError,
    Invalid,
    capabilities,
    from_dict,
    parse_yaml,
    to_dict,
)
from llmgw.config.types import Duration, Size, describe
from llmgw.errors import N_
from llmgw.protocol import EngineProfile

MB = 1024 * 1024
GB = 1024 * MB

# Names go into URLs (/api/v1/models/NAME) and engines' command lines, so no
# slash and no space; aliases are what clients ask for and may carry the
# vendor's own spelling ("Qwen/Qwen2.5-7B-Instruct").
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# More cards than one replica of any model spans, across every node it may take.
MAX_GPUS = 1024
_CC = re.compile(r"^\d+\.\d+$")
_SOURCE_KINDS = ("/", "file://", "http://", "https://", "hf:", "mirror:")
# Engines that need no weights of their own.
_NO_WEIGHTS = ("sim",)
# Engines that size their KV cache to the card themselves: a context change
# moves no memory figure for them.
SELF_SIZING = ("strata", "freetoken")
ROLE_LABEL = "llmgw.role"


def _check_size(value: int) -> None:
    if 0 < value < 16 * MB:
        raise Invalid("memory", N_("{value} is {value} bytes; write a size like 4GB or 512MB "
                                   "(a bare number counts bytes)"), params={"value": value})


@dataclass
class GPUNeed:
    """The cards one replica needs, all on one node."""

    count: int = 1
    """How many cards."""

    classes: list[str] = field(default_factory=list)
    """Card classes accepted (`h100`, `a100-80g`, `rtx6000`); a class matches a card's own (`h100-80g`) or its family.
    Empty takes any."""

    memory: Size = field(default_factory=Size)
    """Memory wanted free on each card (weights, KV cache, the engine's own). 0 is the whole card, shared with
    nothing."""

    min_compute_capability: str = ""
    """The oldest architecture the engine or the weights' format runs on, like 8.9 for FP8. Empty takes any."""

    def validate(self) -> None:
        if self.count < 1:
            raise Invalid("count", N_('must be 1 or more, got {value}; leave gpus out for a profile on CPUs'),
                                   params={"value": self.count})
        # The check of a new model numbers its cards 0..count-1: a count of
        # 2**63 once ran the admin API out of memory (a 500, found by the fuzz).
        if self.count > MAX_GPUS:
            raise Invalid("count", N_('must be at most {most}, got {count}'),
                                   params={"most": MAX_GPUS, "count": self.count})
        _check_size(int(self.memory))
        if self.min_compute_capability and not _CC.match(self.min_compute_capability):
            raise Invalid("min_compute_capability",
                          N_('expected a compute capability like "8.9", got {min_compute_capability}'),
                          params={"min_compute_capability": describe(self.min_compute_capability)})
        for i, c in enumerate(self.classes):
            if not c.strip():
                raise Invalid(f"classes[{i}]", N_("must not be empty"))

    @property
    def min_cc(self) -> float:
        return float(self.min_compute_capability) if self.min_compute_capability else 0.0


@dataclass
class Profile:
    """One way to run a replica: an engine, what it is given, and what it needs of a node."""

    engine: str
    """llamacpp, vllm, sglang, trtllm, comfyui, strata, freetoken or sim."""

    args: list[str] = field(default_factory=list)
    """Extra arguments for the engine, after the ones llmgw gives it."""

    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the engine."""

    cpu_cores: int = 0
    """Cores kept for it on its node. 0 keeps none (it shares them all)."""

    memory: Size = field(default_factory=Size)
    """Memory (RAM) kept for it on its node: the weights and KV cache on CPUs, the engine's own beside cards."""

    gpus: GPUNeed | None = None
    """The cards it needs; none for a profile on CPUs."""

    node_selector: dict[str, str] = field(default_factory=dict)
    """Labels a node must have, every one (`llmgw.role: judge`). A node labelled llmgw.role takes only profiles that
    select its role."""

    size_from_weights: bool = False
    """The weights' size was not known when the model was added (`ctl model serve` sets it): `cpu_cores` and `memory`
    are a first guess, and once a node reports the file's length each replica keeps a core per 512 MB (up to
    `cpu_cores`) and the file and a quarter more (1 GB at least) of memory instead."""

    def validate(self) -> None:
        if self.engine not in KNOWN_ENGINES:
            near = difflib.get_close_matches(self.engine, KNOWN_ENGINES, n=1, cutoff=0.6)
            tail = f"did you mean {near[0]}?" if near else f"the engines are {', '.join(KNOWN_ENGINES)}"
            raise Invalid("engine", N_('unknown engine {engine}; {tail}'),
                                    params={"engine": describe(self.engine), "tail": tail})
        if self.cpu_cores < 0:
            raise Invalid("cpu_cores", N_("must be 0 or more, got {value}"), params={"value": self.cpu_cores})
        _check_size(int(self.memory))
        for key in self.env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise Invalid(f"env.{key}", N_("is not an environment variable's name"))


@dataclass
class OnDemand:
    """A model loaded when asked for, whose replicas give their room to others once idle."""

    evict_after_idle: Duration = field(default_factory=lambda: Duration("2m"))
    """How long a replica must go unasked-for before a model that wants its room may have it."""

    min_lifetime: Duration = field(default_factory=lambda: Duration("5m"))
    """How long a replica that has just come up is safe from that, so two models do not take turns paying for loads."""


@dataclass
class Scaling:
    min: int = 1
    """Replicas always running (an on-demand model's may be 0)."""

    max: int = 0
    """The most replicas; 0 is the same as min."""

    on_demand: OnDemand | None = None
    """Load when asked for and give way when idle (`on_demand: {}` for the defaults); none keeps min running."""

    def validate(self) -> None:
        if self.min < 0:
            raise Invalid("min", N_("must be 0 or more, got {value}"), params={"value": self.min})
        if self.max < 0:
            raise Invalid("max", N_("must be 0 or more, got {value}"), params={"value": self.max})
        if self.max and self.max < self.min:
            raise Invalid("max", N_("{max} is fewer than min ({min})"), params={"max": self.max, "min": self.min})
        if self.on_demand is None and self.min == 0 and self.max:
            raise Invalid("min", N_("0 with a max runs nothing; for replicas loaded when asked, add on_demand: {}"))

    @property
    def most(self) -> int:
        """The most replicas, at least one for an on-demand model asked for."""
        top = self.max or self.min
        return max(top, 1) if self.on_demand is not None else top


@dataclass
class OriginFile:
    """One file of a model from Hugging Face, as the hub described it at the pinned commit."""

    size: int = 0
    sha256: str = ""
    """Published by Hugging Face for a file kept in LFS (the weights); "" for a small git file."""
    scan: str = ""
    """Hugging Face's scan of the file when it was pinned: safe, unsafe, suspicious…; "" where it gave none."""


@dataclass
class Origin:
    """Where a model from Hugging Face came from, filled in by the control plane when the model is added: the
    revision asked for, the commit it was then, each file as the hub described it, and who vouched for the
    publisher. Kept with the model; `llmgw ctl model show` prints it."""

    hub: str = ""
    """The hub asked (hub.endpoint then)."""
    repo: str = ""
    """org/repo."""
    revision: str = ""
    """As asked (main, a tag, or a commit)."""
    commit: str = ""
    """The commit that revision was when the model was added; the nodes fetch this one only."""
    files: dict[str, OriginFile] = field(default_factory=dict)
    publisher: str = ""
    trusted: Literal["", "publisher", "administrator"] = ""
    """Why its publisher was taken: on hub.trusted_publishers, or an administrator said so (--trust)."""
    trusted_by: str = ""
    """The administrator who said so."""
    pinned_at: str = ""
    """When it was pinned, as UTC ISO 8601."""

    def validate(self) -> None:
        if self.commit and not re.match(r"^[0-9a-f]{40}$", self.commit):
            raise Invalid("commit", N_("expected the commit's 40 lowercase hexadecimal digits"))
        for name, file in self.files.items():
            if file.sha256 and not _SHA256.match(file.sha256):
                raise Invalid(f"files.{name}.sha256", N_("expected 64 lowercase hexadecimal digits, as sha256sum "
                                                         "prints"))


@dataclass
class ModelSpec:
    """A catalog model: what it is, where its weights are, and how its replicas run."""

    name: str
    """What clients ask for in `model`, and what the engines serve it as."""

    source: str = ""
    """The weights: a path on the nodes, http(s)://, hf:org/repo/file[@revision], mirror:…; empty for sim."""

    aliases: list[str] = field(default_factory=list)
    """Other names clients may ask for it by."""

    sha256: str = ""
    """The weights' sha256: a node refuses a download that differs."""

    files: dict[str, str] = field(default_factory=dict)
    """A set of several files: each name under `source` and its sha256."""

    allow_pickle: bool = False
    """Let nodes load weights in a pickle format (.bin, .pt, .pth, .ckpt), which run code as they load. For a model with
    no other form whose files were checked."""

    role: Literal["", "chat", "judge", "embedding"] = ""
    """What it is for: a judge runs without a prompt cache, an embedding model serves /v1/embeddings."""

    capabilities: list[Capability] = field(default_factory=list)
    """What it does, of chat, completions, embeddings, vision, tools, thinking, images and workflows (shown in
    /v1/models; a request for anything else is refused with 400). Empty: what its engine does — chat, completions, tools
    and thinking on the language engines, all of a language model's on sim, embeddings alone with role: embedding,
    workflows on ComfyUI (and images where it makes pictures)."""

    profiles: list[Profile] = field(default_factory=list)
    """Ways to run a replica, best first."""

    scaling: Scaling = field(default_factory=Scaling)
    """How many replicas, and whether they load on demand."""

    context_length: int = 0
    """Tokens one request may use, prompt and answer. 0 is the engine's default."""

    slots: int = 0
    """Requests one replica serves at once (llama.cpp's --parallel), each with a whole context. 0 is the engine's
    default."""

    max_output: int = 0
    """The longest answer a request may ask for; 0 is no limit beyond the context."""

    trained_context: int = 0
    """The longest context the model was trained for; a longer context_length is refused. 0 is not known."""

    kv_bytes_per_token: int = 0
    """What one token of context takes in the KV cache, in bytes (layers × KV heads × head size × 2 × 2 at f16); lets a
    context change move the memory kept. 0 is not known."""

    replace: Literal["beside", "in_place"] = "beside"
    """How a changed replica is replaced: `beside` starts the new one and stops the old once it is ready; `in_place`
    stops the old first (no room beside it; the model does not answer meanwhile unless it has other replicas)."""

    stopped: bool = False
    """Kept in the catalog with none of its replicas running (`ctl model stop`)."""

    tokenizer: str = ""
    """A folder on the control planes with the model's tokenizer.json (and tokenizer_config.json, for its chat
    template): the router cuts each prompt with it to route by what each replica has cached (docs/routing.md).
    Empty: for a model from Hugging Face, the pinned commit's, which each control plane fetches; else the source,
    where that is a folder path; none for the rest."""

    comfyui: ComfyUIModel | None = None
    """For a model on ComfyUI: its workflow, the inputs a run may set, what it makes and its licence (docs/media.md).
    A ComfyUI profile needs it."""

    origin: Origin | None = None
    """Set by the control plane for a model from Hugging Face: the commit it is pinned to and each file's
    sha256 and scan (docs/models.md, "From Hugging Face"). Not written by hand."""

    def validate(self) -> None:
        if not _NAME.match(self.name):
            raise Invalid("name", N_('{name} is not a model name: letters, digits and . _ : - (no spaces or '
                                     'slashes), starting with a letter or digit'), params={"name": describe(self.name)})
        seen = {self.name}
        for i, alias in enumerate(self.aliases):
            if not _ALIAS.match(alias):
                raise Invalid(f"aliases[{i}]", N_("{alias} is not a model name"), params={"alias": describe(alias)})
            if alias in seen:
                raise Invalid(f"aliases[{i}]", N_("{alias} is given twice (or is the model's own name)"),
                                               params={"alias": alias})
            seen.add(alias)
        if self.sha256 and not _SHA256.match(self.sha256):
            raise Invalid("sha256", N_("expected 64 lowercase hexadecimal digits, as sha256sum prints"))
        if self.sha256 and self.files:
            raise Invalid("files", N_("a set of files has a sha256 for each file, not one for the set"))
        for name, digest in self.files.items():
            if name.startswith("/") or ".." in name.split("/") or not name.strip():
                raise Invalid(f"files.{name}", N_("must be a name inside the set, not a path out of it"))
            if not _SHA256.match(digest):
                raise Invalid(f"files.{name}", N_("expected its sha256: 64 lowercase hexadecimal digits"))
        twice = capabilities.duplicate(self.capabilities)
        if twice:
            raise Invalid("capabilities", N_("{twice} is given twice"), params={"twice": twice})
        if not self.profiles:
            raise Invalid("profiles", N_("needs at least one profile: the engine and what a replica needs"))
        needs_source = any(p.engine not in _NO_WEIGHTS for p in self.profiles)
        if needs_source and not self.source:
            raise Invalid("source",
                          N_("required: where the weights are (a path on the nodes, https://…, hf:org/repo/file)"))
        if self.source:
            if not self.source.startswith(_SOURCE_KINDS):
                raise Invalid("source", N_('{source} is neither an absolute path on the nodes nor http(s)://, '
                                           'hf:org/repo/file nor mirror:…'), params={"source": describe(self.source)})
            if not self.allow_pickle:
                from llmgw.engines import PICKLE_EXTENSIONS, is_pickle

                pickled = [self.source] if is_pickle(self.source) else [n for n in self.files if is_pickle(n)]
                if pickled:
                    raise Invalid("source" if pickled[0] == self.source else f"files.{pickled[0]}",
                                  N_('{pickled} is in a pickle format ({extensions}), which runs code when it is '
                                     "loaded; use the model's safetensors or GGUF, or set allow_pickle: true if its "
                                     'files were checked and it has no other form'),
                                  params={"pickled": pickled[0], "extensions": ', '.join(PICKLE_EXTENSIONS)})
        comfy = [p.engine == "comfyui" for p in self.profiles]
        if any(comfy) and not all(comfy):
            raise Invalid("profiles", N_("a ComfyUI model's profiles are all comfyui: its requests are workflows, "
                                         "which no other engine runs"))
        if any(comfy) and self.comfyui is None:
            raise Invalid("comfyui", N_("a model on ComfyUI needs comfyui: {workflow: text-to-image} (or a workflow "
                                        "file of its own)"))
        if self.comfyui is not None and not any(comfy):
            raise Invalid("comfyui", N_("only a model whose profiles run comfyui takes a workflow"))
        if self.comfyui is not None:
            from llmgw.engines import WorkflowError, load_workflow

            try:
                load_workflow(self.comfyui)
            except WorkflowError as e:
                raise Invalid(f"comfyui.{e.param or 'workflow'}", N_("{problem}"), params={"problem": str(e)}) from None
        if self.origin is not None and self.origin.commit:
            named = self.source.rpartition("@")[2] if self.source.startswith("hf:") else ""
            if named != self.origin.commit:
                raise Invalid("origin.commit", N_("{commit} is not the commit the source names ({source}); the origin "
                                                  "is the control plane's to write: leave it out, and the model is "
                                                  "pinned again when it is added"),
                              params={"commit": self.origin.commit, "source": describe(self.source)})
        for key in ("context_length", "slots", "max_output", "trained_context", "kv_bytes_per_token"):
            if getattr(self, key) < 0:
                raise Invalid(key, N_("must be 0 or more, got {value}"), params={"value": getattr(self, key)})
        if self.trained_context and self.context_length > self.trained_context:
            raise Invalid("context_length", N_('{context_length} is longer than the model was trained for '
                                               '({trained_context} tokens)'),
                                            params={"context_length": self.context_length,
                                                    "trained_context": self.trained_context})
        if self.context_length and self.max_output > self.context_length:
            raise Invalid("max_output", N_('{max_output} is more than context_length ({context_length}); an answer '
                                           'must fit in the context'),
                                        params={"max_output": self.max_output, "context_length": self.context_length})

    # --- what replicas run ---------------------------------------------------------------------

    def engine_profile(self, index: int, gpus: list[int] | None = None) -> EngineProfile:
        """What StartShard carries for a replica on profile `index`, on cards `gpus` of its node."""
        p = self.profiles[index]
        return EngineProfile(
            engine=p.engine, model=self.name, source=self.source, sha256=self.sha256, files=dict(self.files),
            allow_pickle=self.allow_pickle, args=list(p.args), env=dict(p.env), cpu_cores=p.cpu_cores,
            memory_mb=int(p.memory) // MB, gpus=list(gpus or []), context_length=self.context_length,
            slots=self.slots, role=self.role if self.role in ("judge", "embedding") else "",
        )

    def profile_hash(self, index: int, restarts: int = 0) -> str:
        """What a replica on profile `index` was started with, in 16 hex digits.

        Taken over what reaches the engine and what the replica holds, not
        over the whole spec: a new max_output or alias is the gateway's
        alone and restarts nothing. The cards' indexes are left out (the
        placement picks them); their count and needs are in.
        """
        profile = dataclasses.asdict(self.engine_profile(index))
        profile.pop("gpus")
        need = self.profiles[index].gpus
        doc = {"engine": profile, "gpus": to_dict(need) if need else None, "restarts": restarts}
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

    def can(self) -> tuple[str, ...]:
        """Its capabilities in force: as declared, else its engines' (config/capabilities.py)."""
        # A list[str] of them: for_catalog's parameter is a list, invariant, and theirs are Capability literals.
        output = self.comfyui.output if self.comfyui is not None else ""
        return capabilities.for_catalog(list(self.capabilities), (p.engine for p in self.profiles), self.role, output)

    def weights(self) -> list[str]:
        """The sources a node keeps for it (RemoveWeights names them)."""
        return [self.source] if self.source else []

    def to_doc(self) -> dict[str, Any]:
        """The spec as a document that loads back the same (what the store keeps)."""
        doc: dict[str, Any] = to_dict(self)  # a dataclass's is always an object
        if doc.get("origin") is None:
            del doc["origin"]  # a model from anywhere else has none, and its document says nothing of it
        return doc


class SpecError(ConfigError):
    """A model file or document the catalog refuses; str() names the key at fault."""


def load_spec(doc: Any, where: str = "") -> ModelSpec:
    """A ModelSpec from a parsed document, validated; SpecError naming the key otherwise.

    `where` (a file's name) is put in front of the message.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(doc, dict):
        raise SpecError(f"{prefix}a model is a mapping of keys (name, source, profiles, …), got {describe(doc)}")
    try:
        return from_dict(ModelSpec, doc)
    except ConfigError as e:
        raise SpecError(f"{prefix}{e}", key=e.key, problem=e.problem) from None


def parse_spec_text(text: str, where: str = "") -> ModelSpec:
    """A model file's text (YAML, or JSON, which YAML reads too) as a ModelSpec."""
    import yaml

    prefix = f"{where}: " if where else ""
    try:
        doc = parse_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(f"{prefix}{at}{getattr(e, 'problem', None) or e}") from None
    return load_spec(doc, where)
