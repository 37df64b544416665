"""llmgw's own picture models, ready to add: presets, and where each stands in a cluster.

A preset is a catalog document like any model file (docs/models.md), kept
here so a cluster whose node offers ComfyUI makes pictures without anyone
writing one. The leading control plane adds one where a node has ComfyUI and
a card it fits and the catalog makes nothing of its kind (control/presets.py
does that, with `presets.auto` on); `judge` is the pure part of that pass,
and what `llmgw ctl model presets` shows.

Each preset loads on demand (`scaling: {min: 0, on_demand: {}}`): adding one
fetches nothing; the first request for it does. Its `hf:` source is pinned
to the commit Hugging Face has when it is added, as every model from there
is (catalog/pinning.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.fit import Need, gb, static_refusal
from llmgw.control.catalog.spec import ModelSpec, load_spec
from llmgw.engines import SCHEDULERS
from llmgw.errors import N_

# The text-to-image inputs a preset sets its own defaults for; the rest are the built-in workflow's.
_SIZE_512 = {"type": "integer", "default": 512, "min": 64, "max": 2048}


def _scheduler(default: str) -> dict[str, Any]:
    return {"type": "choice", "default": default, "choices": list(SCHEDULERS),
            "description": "How the steps are spaced."}


# FLUX.1 [schnell], as Comfy-Org packs it in one checkpoint CheckpointLoaderSimple loads (the transformer and T5-XXL
# at fp8, CLIP-L and the VAE): 17.2 GB on Hugging Face, of which the transformer is 11.9 GB and T5-XXL 4.9 GB.
# Sampling 1024 × 1024 in bf16 adds about 2 GB of activations, so 20 GB on one card: a 24 GB card (L4, A10, RTX
# 3090/4090) holds it whole. ComfyUI reads the checkpoint into memory before it moves it to the card, hence 20 GB
# of RAM. Black Forest Labs' schnell is distilled for 4 steps with no guidance: cfg 1.0, euler, the simple schedule
# (ComfyUI's own example of this checkpoint).
FLUX_SCHNELL: dict[str, Any] = {
    "name": "flux-schnell",
    "source": "hf:Comfy-Org/flux1-schnell/flux1-schnell-fp8.safetensors",
    "profiles": [{"engine": "comfyui", "memory": "20GB", "gpus": {"count": 1, "memory": "20GB"}}],
    "scaling": {"min": 0, "on_demand": {}},
    "comfyui": {
        "workflow": "text-to-image",
        "output": "pictures",
        "inputs": {
            "steps": {"type": "integer", "default": 4, "min": 1, "max": 50, "description": "Sampler steps."},
            "cfg": {"type": "number", "default": 1.0, "min": 0, "max": 30,
                    "description": "How closely it follows the prompt; schnell is made for 1.0."},
            "scheduler": _scheduler("simple"),
        },
        "license": {"id": "apache-2.0", "name": "Apache License 2.0",
                    "url": "https://huggingface.co/black-forest-labs/FLUX.1-schnell", "commercial": True},
    },
}

# SDXL-Turbo in fp16: 6.9 GB on Hugging Face (the UNet 5.1 GB, its two text encoders 1.6 GB, the VAE 0.2 GB). At its
# own 512 × 512 the activations are well under a gigabyte, so with CUDA's own half a gigabyte it takes about 8.5 GB:
# 10 GB on one card, which a 12 GB card holds. 8 GB of RAM for reading the checkpoint. Made for 1 to 4 steps without
# guidance (cfg 1.0 here: ComfyUI skips the negative prompt at exactly 1); ComfyUI's example samples it with
# euler_ancestral on SDTurboScheduler's spacing, which sgm_uniform is nearest to.
SDXL_TURBO: dict[str, Any] = {
    "name": "sdxl-turbo",
    "source": "hf:stabilityai/sdxl-turbo/sd_xl_turbo_1.0_fp16.safetensors",
    "profiles": [{"engine": "comfyui", "memory": "8GB", "gpus": {"count": 1, "memory": "10GB"}}],
    "scaling": {"min": 0, "on_demand": {}},
    "comfyui": {
        "workflow": "text-to-image",
        "output": "pictures",
        "inputs": {
            "steps": {"type": "integer", "default": 4, "min": 1, "max": 50, "description": "Sampler steps."},
            "cfg": {"type": "number", "default": 1.0, "min": 0, "max": 30,
                    "description": "How closely it follows the prompt; the turbo model is made for 1.0."},
            "width": {**_SIZE_512, "description": "Width in pixels; it was trained at 512."},
            "height": {**_SIZE_512, "description": "Height in pixels; it was trained at 512."},
            "sampler": {"type": "choice", "default": "euler_ancestral",
                        "choices": ["euler", "euler_ancestral", "dpmpp_2m", "dpmpp_sde", "lcm"],
                        "description": "How each step moves from noise towards the picture."},
            "scheduler": _scheduler("sgm_uniform"),
        },
        # Its model card: license_name sai-nc-community, "For commercial use, please refer to
        # https://stability.ai/license".
        "license": {"id": "sai-nc-community", "name": "Stability AI Non-Commercial Research Community License",
                    "url": "https://huggingface.co/stabilityai/sdxl-turbo/blob/main/LICENSE.md", "commercial": False,
                    "notice": "For commercial use, see https://stability.ai/license"},
    },
}


@dataclass(frozen=True)
class Preset:
    name: str
    what: str
    """What it is, in a few words, for the list."""
    doc: dict[str, Any] = field(repr=False)
    """Its catalog document, as a model file would say it."""

    def spec(self) -> ModelSpec:
        return load_spec(copy.deepcopy(self.doc), f"the preset {self.name}")

    def document(self) -> dict[str, Any]:
        """A copy to add: the catalog pins it, so the preset's own is never written to."""
        return copy.deepcopy(self.doc)

    @property
    def makes(self) -> str:
        return str(self.doc["comfyui"].get("output", "pictures"))

    @property
    def needs(self) -> Need:
        return Need.of(self.spec(), 0)

    def card(self) -> str:
        """The card it needs, as a person reads it: "1 GPU with 20.0 GB free each"."""
        return self.needs.describe_cards()


# Best first: where a node fits several of one kind, the first is added, and then the catalog makes that kind.
PRESETS: tuple[Preset, ...] = (
    Preset("flux-schnell", "FLUX.1 schnell: 1024 × 1024 pictures in 4 steps, Apache 2.0", FLUX_SCHNELL),
    Preset("sdxl-turbo", "SDXL-Turbo: 512 × 512 pictures in 4 steps, non-commercial", SDXL_TURBO),
)
PRESET: dict[str, Preset] = {p.name: p for p in PRESETS}


def preset(name: str) -> Preset:
    """The preset named `name`, or a refusal naming the presets there are."""
    found = PRESET.get(name)
    if found is None:
        raise Refusal(N_("llmgw has no preset named {name}; its presets are {presets}"), 404, "not_found",
                      params={"name": name, "presets": ", ".join(PRESET)})
    return found


def makes(doc: dict[str, Any]) -> str:
    """What a catalog model's document makes: pictures, meshes or files for a ComfyUI model ("pictures" too for one
    declaring images), "" for the rest."""
    comfy = doc.get("comfyui")
    if isinstance(comfy, dict):
        return str(comfy.get("output") or "pictures")
    return "pictures" if "images" in (doc.get("capabilities") or []) else ""


State = Literal["in_catalog", "declined", "made", "kind_declined", "no_node", "to_add", "fits"]


@dataclass(frozen=True)
class Verdict:
    """Where one preset stands: `state` for a script, `said` for a person."""

    name: str
    what: str
    makes: str
    card: str
    state: State
    said: str
    nodes: tuple[str, ...] = ()
    """The nodes with ComfyUI and a card it fits."""

    def view(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "makes": self.makes, "card": self.card, "state": self.state,
                "said": self.said, "nodes": list(self.nodes)}


def fits_on(need: Need, nodes: Iterable[NodeView]) -> tuple[str, ...]:
    """The nodes placement could ever put `need` on: ComfyUI among their engines, labels that allow it, a card
    it fits (fit.static_refusal), and the memory it keeps, of all the node has."""
    return tuple(n.name for n in nodes if static_refusal(n, need) is None and n.memory_mb >= need.memory_mb)


def judge(auto: bool, declined: Iterable[str], catalog: dict[str, str], nodes: list[NodeView],
          presets: Iterable[Preset] = PRESETS) -> list[Verdict]:
    """Each preset's state, in order: added by a pass are those `to_add`.

    `catalog` is every model the cluster has, by name, with what it makes ("" for a language model); `nodes` the
    nodes heard from lately. A preset `to_add` counts as making its kind for the presets after it, so one pass adds
    one preset of a kind; a declined preset keeps the others of its kind from being added by themselves."""
    refused = set(declined)
    made_by = {kind: name for name, kind in sorted(catalog.items()) if kind}
    presets = list(presets)
    # A person who removed one picture model did not ask for another in its place.
    refused_kinds = {p.makes: p.name for p in reversed(presets) if p.name in refused and p.name not in catalog}
    comfy_nodes = [n for n in nodes if "comfyui" in n.engines]
    out = []
    for p in presets:
        need = p.needs
        where = fits_on(need, nodes)
        state: State
        if p.name in catalog:
            state, said = "in_catalog", "in the catalog"
        elif p.name in refused:
            state, said = "declined", (f"declined (its model was removed); llmgw ctl model presets add {p.name} "
                                       "adds it again")
        elif p.makes in made_by:
            state, said = "made", f"{made_by[p.makes]} makes {p.makes} already"
        elif p.makes in refused_kinds:
            other = refused_kinds[p.makes]
            state, said = "kind_declined", (f"{other}, which makes {p.makes} too, was declined, so none of its kind "
                                            f"is added by itself; llmgw ctl model presets add {p.name} adds it")
        elif not where:
            state = "no_node"
            if not comfy_nodes:
                said = "fits no node: none offers ComfyUI (engines.comfyui.dir in a node's agent.yaml)"
            else:
                said = (f"fits no node: none of {', '.join(n.name for n in comfy_nodes)} with ComfyUI has "
                        f"{need.describe_cards()}" + (f" and {gb(need.memory_mb)} of memory" if need.memory_mb else ""))
        elif auto:
            state, said = "to_add", f"would be added: it fits on {', '.join(where)}"
            made_by[p.makes] = f"{p.name} (to be added)"
        else:
            state, said = "fits", (f"fits on {', '.join(where)}; presets.auto is off, so llmgw ctl model presets add "
                                   f"{p.name} adds it")
        out.append(Verdict(p.name, p.what, p.makes, p.card(), state, said, where))
    return out
