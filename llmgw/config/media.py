"""A ComfyUI model's side of the catalog: its workflow, the inputs a run may set, what it makes, its licence.

    name: sdxl-turbo
    source: hf:stabilityai/sdxl-turbo/sd_xl_turbo_1.0_fp16.safetensors
    profiles: [{engine: comfyui, gpus: {count: 1}}]
    comfyui:
      workflow: text-to-image          # built in; or the path of a JSON file on every control plane
      inputs:
        steps: {type: integer, default: 4, min: 1, max: 50}
      license: {id: stability-community, commercial: false, url: https://…}

A workflow is ComfyUI's API format (the JSON "Export (API)" saves), with
`{{name}}` or `{{name|default}}` in place of an input's value: the run's
value goes there, converted to the input's type, so a `{{steps}}` becomes the
number 4 and not the text "4". The built-in workflows declare their own
inputs (llmgw/router/media/workflows.py); `inputs` here adds to them or
changes a default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from llmgw.config.loader import Invalid
from llmgw.config.types import describe
from llmgw.errors import N_

InputType = Literal["text", "integer", "number", "boolean", "choice", "seed", "image", "mask", "file"]
# Inputs whose value is a picture or a file: given as a `file-…` id, a data URL or base64, uploaded to the replica.
FILE_TYPES = ("image", "mask", "file")
Output = Literal["pictures", "meshes", "files"]
_INPUT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_LICENSE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")
_REGION = re.compile(r"^[A-Z]{2}$")


@dataclass(frozen=True)
class WorkflowInput:
    """One value a run of the workflow may set."""

    type: InputType = "text"
    """text, integer, number, boolean, choice (one of `choices`), seed (an integer; random when not given), image,
    mask or file (a `file-…` id from /v1/files, a data URL or base64)."""

    description: str = ""
    """What it is, for the portal's form, the MCP tool's schema and a refusal."""

    default: Any = None
    """The value when a run does not give one; none makes it required unless `required: false`."""

    required: bool = False
    """A run must give it, default or not."""

    choices: list[str] = field(default_factory=list)
    """A choice's values."""

    min: float | None = None
    """The least an integer or number may be."""

    max: float | None = None
    """The most an integer or number may be, or the most characters a text may have."""

    def validate(self) -> None:
        if self.type == "choice" and not self.choices:
            raise Invalid("choices", N_("a choice needs its values: choices: [a, b]"))
        if self.type != "choice" and self.choices:
            raise Invalid("choices", N_("only a choice has choices; this input is {type}"), params={"type": self.type})
        if self.min is not None and self.max is not None and self.min > self.max:
            raise Invalid("min", N_("{min} is more than max ({max})"), params={"min": self.min, "max": self.max})
        if self.default is not None and self.type not in FILE_TYPES:
            try:
                self.convert(self.default)
            except InputValueError as e:
                raise Invalid("default", N_("{problem}"), params={"problem": e.sentence}) from None

    def convert(self, value: Any) -> Any:
        """`value` as the workflow takes it (a whole number for an integer, True for a boolean…), or
        InputValueError saying what was expected. A file input's value is left as it is: the router uploads it."""
        kind = self.type
        if kind in FILE_TYPES:
            if not isinstance(value, str) or not value:
                raise InputValueError(f"expected a {kind}: a file-… id from /v1/files, a data URL or base64")
            return value
        if kind in ("integer", "seed"):
            # Up to 20 digits: a seed is up to 2^64-1, which a browser sends as its digits (a number would round).
            if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value.strip()):
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InputValueError(f"expected a whole number, got {describe(value)}")
            if kind == "seed" and not 0 <= value < 2 ** 64:
                raise InputValueError(f"a seed is from 0 to 2^64-1, got {value}")
            self._within(value)
            return value
        if kind == "number":
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    pass
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
                raise InputValueError(f"expected a number, got {describe(value)}")
            self._within(value)
            return value
        if kind == "boolean":
            # A workflow's {{name|false}} default is text: the word, read as the boolean (the original's v0.14.5 fix).
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            if not isinstance(value, bool):
                raise InputValueError(f"expected true or false, got {describe(value)}")
            return value
        if kind == "choice":
            if value not in self.choices:
                raise InputValueError(f"expected one of {', '.join(self.choices)}, got {describe(value)}")
            return value
        if not isinstance(value, str):
            raise InputValueError(f"expected text, got {describe(value)}")
        if self.max is not None and len(value) > self.max:
            raise InputValueError(f"is {len(value)} characters; the most is {int(self.max)}")
        return value

    def _within(self, value: float) -> None:
        if self.min is not None and value < self.min:
            raise InputValueError(f"{value} is less than the least, {_plain(self.min)}")
        if self.max is not None and value > self.max:
            raise InputValueError(f"{value} is more than the most, {_plain(self.max)}")


class InputValueError(ValueError):
    """A value an input cannot take; `sentence` says what was expected."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


@dataclass(frozen=True)
class License:
    """The model's licence, written into everything it makes (a PNG's iTXt, a GLB's extras) and shown beside it."""

    id: str = ""
    """SPDX's identifier where there is one (apache-2.0, mit), else a short lowercase name (stability-community)."""

    name: str = ""
    """Its name as its publisher writes it."""

    url: str = ""
    """Where its text is."""

    commercial: bool | None = None
    """Whether what it makes may be used commercially; none is not said."""

    excluded_regions: list[str] = field(default_factory=list)
    """Where it may not be used: ISO 3166 codes, EU for the union."""

    revenue_cap: str = ""
    """A revenue above which a licence of the publisher's is needed (\"USD 1M a year\"), where it has one."""

    attribution: str = ""
    """What must be said of an output's origin, where the licence asks."""

    notice: str = ""
    """Anything else to carry with every output."""

    def validate(self) -> None:
        if self.id and not _LICENSE_ID.match(self.id):
            raise Invalid("id", N_("{id} is not a licence's identifier: letters, digits and . + _ -"),
                          params={"id": describe(self.id)})
        for i, region in enumerate(self.excluded_regions):
            if not (_REGION.match(region)):
                raise Invalid(f"excluded_regions[{i}]", N_("{region} is not an ISO 3166 code like DE, or EU"),
                              params={"region": describe(region)})

    def fields(self) -> dict[str, Any]:
        """What it says, without what it leaves unsaid: the licence as outputs and answers carry it."""
        out: dict[str, Any] = {}
        for key in ("id", "name", "url", "revenue_cap", "attribution", "notice"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.commercial is not None:
            out["commercial"] = self.commercial
        if self.excluded_regions:
            out["excluded_regions"] = list(self.excluded_regions)
        return out


@dataclass(frozen=True)
class ComfyUIModel:
    """What a ComfyUI model runs and makes (docs/media.md)."""

    workflow: str = "text-to-image"
    """A built-in workflow (text-to-image, image-to-image) or the absolute path of a workflow in ComfyUI's API format, a
    JSON file on every control plane."""

    output: Output = "pictures"
    """What it makes: pictures (it answers /v1/images/generations as well as workflow runs), meshes or files."""

    inputs: dict[str, WorkflowInput] = field(default_factory=dict)
    """The values a run may set, by name, besides the built-in workflow's own; a name the workflow does not use as
    `{{name}}` is refused when the model is added."""

    license: License | None = None
    """Its licence, written into each output."""

    checkpoint: str = ""
    """The weights' file name as ComfyUI knows them (a CheckpointLoaderSimple's ckpt_name), put for `{{checkpoint}}`.
    Empty: the file name of the model's source."""

    def validate(self) -> None:
        if not self.workflow:
            raise Invalid("workflow", N_("name a built-in workflow (text-to-image, image-to-image) or a JSON file's "
                                         "absolute path"))
        if "/" in self.workflow and not self.workflow.startswith("/"):
            raise Invalid("workflow", N_("{workflow} is neither a built-in workflow nor an absolute path"),
                          params={"workflow": describe(self.workflow)})
        for name in self.inputs:
            if not _INPUT_NAME.match(name):
                raise Invalid(f"inputs.{name}", N_("an input's name is lowercase letters, digits and _, starting "
                                                   "with a letter"))
