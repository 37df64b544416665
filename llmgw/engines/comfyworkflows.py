"""ComfyUI workflows with inputs: the built-in ones, a site's own from a file, and a run's values put in.

A workflow is ComfyUI's API format: {"node id": {"class_type": …, "inputs": {…}}}.
Where a run's value goes, the workflow says `{{name}}` or `{{name|default}}`.
A string that is only the placeholder takes the value converted to the
input's type (a number stays a number: ComfyUI refuses "20" for a KSampler's
steps); a placeholder inside a longer string is replaced by the value's text.

`checkpoint` is not a person's to set: it is the model's own weights' file
name, which the agent gives ComfyUI (LLMGW_COMFYUI_MODEL).
"""

from __future__ import annotations

import copy
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from llmgw.config import FILE_TYPES, ComfyUIModel, InputValueError, WorkflowInput

Graph = dict[str, Any]

CHECKPOINT = "checkpoint"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z][a-z0-9_]*)\s*(?:\|([^}]*))?\}\}")
# Bounds the built-in workflows keep a run within: a 2048-pixel square at eight a batch is already more than
# most cards hold, and a sampler past 150 steps adds nothing a person sees.
_SIDE = {"type": "integer", "default": 1024, "min": 64, "max": 2048}
# KSampler's own names (ComfyUI's comfy/samplers.py), those that every ComfyUI since 2024 has: a model family wants
# its own pair (Flux schnell euler and simple, SDXL-Turbo euler_ancestral and sgm_uniform), and a name a ComfyUI
# lacks is refused by it at /prompt, naming the input.
SAMPLERS = ("euler", "euler_ancestral", "heun", "dpm_2", "dpm_2_ancestral", "lms", "dpmpp_2s_ancestral", "dpmpp_sde",
            "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_3m_sde", "lcm", "ddim", "uni_pc")
SCHEDULERS = ("normal", "karras", "exponential", "sgm_uniform", "simple", "ddim_uniform", "beta")

TEXT_TO_IMAGE: Graph = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "{{checkpoint}}"}},
    "5": {"class_type": "EmptyLatentImage",
          "inputs": {"width": "{{width}}", "height": "{{height}}", "batch_size": "{{batch_size}}"}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{prompt}}", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{negative_prompt}}", "clip": ["4", 1]}},
    "3": {"class_type": "KSampler",
          "inputs": {"seed": "{{seed}}", "steps": "{{steps}}", "cfg": "{{cfg}}", "sampler_name": "{{sampler}}",
                     "scheduler": "{{scheduler}}", "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0],
                     "negative": ["7", 0], "latent_image": ["5", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "llmgw", "images": ["8", 0]}},
}

IMAGE_TO_IMAGE: Graph = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "{{checkpoint}}"}},
    "10": {"class_type": "LoadImage", "inputs": {"image": "{{image}}"}},
    "11": {"class_type": "VAEEncode", "inputs": {"pixels": ["10", 0], "vae": ["4", 2]}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{prompt}}", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{negative_prompt}}", "clip": ["4", 1]}},
    "3": {"class_type": "KSampler",
          "inputs": {"seed": "{{seed}}", "steps": "{{steps}}", "cfg": "{{cfg}}", "sampler_name": "{{sampler}}",
                     "scheduler": "{{scheduler}}", "denoise": "{{strength}}", "model": ["4", 0], "positive": ["6", 0],
                     "negative": ["7", 0], "latent_image": ["11", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "llmgw", "images": ["8", 0]}},
}

_COMMON: dict[str, dict[str, Any]] = {
    "prompt": {"type": "text", "required": True, "description": "What the picture shows.", "max": 4000},
    "negative_prompt": {"type": "text", "default": "", "description": "What it should not show.", "max": 4000},
    "seed": {"type": "seed", "description": "The same seed and inputs make the same picture; random when not given."},
    "steps": {"type": "integer", "default": 20, "min": 1, "max": 150, "description": "Sampler steps."},
    "cfg": {"type": "number", "default": 7.0, "min": 0, "max": 30,
            "description": "How closely it follows the prompt."},
    "sampler": {"type": "choice", "default": "euler", "choices": list(SAMPLERS),
                "description": "How each step moves from noise towards the picture."},
    "scheduler": {"type": "choice", "default": "normal", "choices": list(SCHEDULERS),
                  "description": "How the steps are spaced: simple suits Flux, sgm_uniform the turbo models."},
}
BUILT_IN: dict[str, tuple[Graph, dict[str, dict[str, Any]]]] = {
    "text-to-image": (TEXT_TO_IMAGE, {
        **_COMMON, "width": {**_SIDE, "description": "Width in pixels."},
        "height": {**_SIDE, "description": "Height in pixels."},
        "batch_size": {"type": "integer", "default": 1, "min": 1, "max": 8, "description": "Pictures in one run."}}),
    "image-to-image": (IMAGE_TO_IMAGE, {
        **_COMMON, "image": {"type": "image", "required": True, "description": "The picture to start from."},
        "strength": {"type": "number", "default": 0.6, "min": 0, "max": 1,
                     "description": "How much of the picture is drawn again: 0 keeps it, 1 draws it anew."}}),
}


class WorkflowError(Exception):
    """A workflow that cannot be read or used, or a run's values it cannot take; str() is the sentence."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Workflow:
    """A workflow ready to run: its graph with placeholders, and every input it takes."""

    name: str
    graph: Graph
    inputs: dict[str, WorkflowInput]

    def fill(self, given: Mapping[str, Any], checkpoint: str, files: Mapping[str, str] | None = None) -> Graph:
        """The graph with `given` put in (each checked against its input), defaults where none was given, a random
        seed where a seed input has none, and `checkpoint` for the model's weights. `files` are the names the replica
        gave the uploaded file inputs. WorkflowError names the input at fault."""
        values = self.values({**given, **(files or {})})
        values[CHECKPOINT] = checkpoint
        return _put(self.graph, values)

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every input's value for a run: given (converted), else its default, else random for a seed."""
        unknown = sorted(set(given) - set(self.inputs))
        if unknown:
            raise WorkflowError(f"{self.name} takes no input {unknown[0]}; it takes {', '.join(sorted(self.inputs))}",
                                unknown[0])
        values: dict[str, Any] = {}
        for name, spec in self.inputs.items():
            if name in given and given[name] is not None:
                try:
                    values[name] = spec.convert(given[name])
                except InputValueError as e:
                    raise WorkflowError(f"{name}: {e.sentence}", name) from None
            elif spec.required or (spec.default is None and spec.type not in ("seed", "text")):
                raise WorkflowError(f"{name} is required: {spec.description or spec.type}", name)
            elif spec.type == "seed":
                values[name] = spec.convert(spec.default) if spec.default is not None else secrets.randbelow(2 ** 63)
            else:
                values[name] = spec.convert(spec.default) if spec.default is not None else ""
        return values

    def file_inputs(self) -> list[str]:
        return [name for name, spec in self.inputs.items() if spec.type in FILE_TYPES]

    def described(self) -> dict[str, Any]:
        """The inputs as a client reads them (the portal's form, the MCP tool's schema, GET on a model)."""
        out: dict[str, Any] = {}
        for name, spec in self.inputs.items():
            doc: dict[str, Any] = {"type": spec.type, "required": spec.required}
            for key in ("description", "default", "choices", "min", "max"):
                value = getattr(spec, key)
                if value not in (None, "", []):
                    doc[key] = value
            out[name] = doc
        return out


def load_workflow(model: ComfyUIModel) -> Workflow:
    """The model's workflow: a built-in one or its file's, with the inputs the model declares over the workflow's
    own; WorkflowError when the file cannot be read or the inputs and the placeholders do not match."""
    name = model.workflow
    if name in BUILT_IN:
        graph, declared = BUILT_IN[name]
        inputs = {key: WorkflowInput(**doc) for key, doc in declared.items()}
    elif name.startswith("/"):
        graph = _read(Path(name))
        inputs = {}
    else:
        raise WorkflowError(f"there is no built-in workflow {name}; the built-in ones are "
                            f"{', '.join(BUILT_IN)}, or give a JSON file's absolute path", "workflow")
    inputs.update(model.inputs)
    used = dict(_placeholders(graph))
    for placeholder, default in used.items():
        if placeholder == CHECKPOINT:
            continue
        if placeholder not in inputs:
            # A placeholder with a default and no declaration is a text input with that default.
            if default is None:
                raise WorkflowError(f"the workflow uses {{{{{placeholder}}}}}, which is not among its inputs; declare "
                                    f"it under comfyui.inputs, or give it a default as {{{{{placeholder}|value}}}}",
                                    "inputs")
            inputs[placeholder] = WorkflowInput(type="text", default=default)
        elif default is not None and inputs[placeholder].default is None:
            spec = inputs[placeholder]
            inputs[placeholder] = WorkflowInput(spec.type, spec.description, default, spec.required,
                                                list(spec.choices), spec.min, spec.max)
    unused = sorted(set(inputs) - set(used))
    if unused:
        raise WorkflowError(f"the input {unused[0]} is not used by the workflow: no {{{{{unused[0]}}}}} in it",
                            "inputs")
    for key, spec in inputs.items():
        if spec.default is not None and spec.type not in FILE_TYPES:
            try:
                spec.convert(spec.default)
            except InputValueError as e:
                raise WorkflowError(f"{key}'s default: {e.sentence}", "inputs") from None
    return Workflow(name, graph, inputs)


def _read(path: Path) -> Graph:
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise WorkflowError(f"the workflow {path} is not on this control plane; put it on every control plane",
                            "workflow") from None
    except OSError as e:
        raise WorkflowError(f"the workflow {path} cannot be read: {e.strerror}", "workflow") from None
    except orjson.JSONDecodeError as e:
        raise WorkflowError(f"the workflow {path} is not JSON: {e}", "workflow") from None
    if not isinstance(doc, dict) or not doc or not all(
            isinstance(node, dict) and isinstance(node.get("class_type"), str) for node in doc.values()):
        raise WorkflowError(f"the workflow {path} is not in ComfyUI's API format (each node with its class_type and "
                            "inputs): save it with Export (API) in ComfyUI", "workflow")
    return doc


def _placeholders(graph: Graph) -> Iterator[tuple[str, str | None]]:
    for node in graph.values():
        for value in (node.get("inputs") or {}).values():
            if isinstance(value, str):
                for m in _PLACEHOLDER.finditer(value):
                    yield m.group(1), m.group(2)


def _put(graph: Graph, values: Mapping[str, Any]) -> Graph:
    out = copy.deepcopy(graph)
    for node in out.values():
        inputs = node.get("inputs") or {}
        for key, value in inputs.items():
            if not isinstance(value, str) or "{{" not in value:
                continue
            whole = _PLACEHOLDER.fullmatch(value.strip())
            if whole is not None:
                inputs[key] = values[whole.group(1)]
            else:
                inputs[key] = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)
    return out
