"""The node classes the ComfyUI stand-in knows: their input specs as /object_info gives them, and what each does.

Enough for a text-to-image graph (CheckpointLoaderSimple, CLIPTextEncode,
EmptyLatentImage, KSampler, VAEDecode, SaveImage) and an image-to-image one
(LoadImage, VAEEncode), with PreviewImage and ComfyUI's primitive nodes. The
specs are ComfyUI's own (names, types, defaults, limits, combo lists), so a
graph the stand-in takes is one a real ComfyUI takes, and the refusals come
out the same.

No diffusion happens. A sampled picture is a pattern drawn from a hash of the
positive prompt, the seed, the size and the batch index (and, image to
image, the source file's bytes): the same graph draws the same pixels, and a
test can tell two prompts' pictures apart. Sizes follow ComfyUI's latents: a
latent is an eighth of the picture each way, so 100 × 100 comes out 96 × 96.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
import string
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw.media import encode_png, size

MAX_RESOLUTION = 16384
# The stand-in draws in Python; past this many pixels a batch it fails as a
# card out of memory does, rather than holding the sim's loop for minutes.
MOST_PIXELS = 4096 * 4096

SAMPLERS = ["euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2", "dpm_2",
            "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral", "dpmpp_2s_ancestral_cfg_pp",
            "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu",
            "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm", "ipndm", "ipndm_v", "deis", "res_multistep",
            "res_multistep_cfg_pp", "gradient_estimation", "er_sde", "seeds_2", "seeds_3", "ddim", "uni_pc",
            "uni_pc_bh2"]
SCHEDULERS = ["simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
              "linear_quadratic", "kl_optimal"]
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
WEIGHT_EXTENSIONS = (".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".sft")


class NodeFailed(Exception):
    """A node's exception as ComfyUI reports it: `kind` is the exception's full type name."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Interrupted(Exception):
    """POST /interrupt reached a running prompt (ComfyUI's InterruptProcessingException)."""


@dataclass(frozen=True)
class Picture:
    """A picture in the graph: its size and pixels (a real IMAGE is a tensor; this is its stand-in)."""

    width: int
    height: int
    rgb: bytes


@dataclass(frozen=True)
class Source:
    """A loaded picture the stand-in does not decode: its size and its bytes' digest, which seed its pattern."""

    width: int
    height: int
    digest: str


@dataclass(frozen=True)
class Latent:
    width: int  # the picture's, a multiple of 8
    height: int
    batch: int
    source: Source | None = None  # VAEEncode's picture, image to image
    drawn: tuple[str, int, float] | None = None  # (positive text, seed, denoise) once a sampler ran


@dataclass
class Folders:
    """Where the stand-in keeps its pictures: ComfyUI's input, output and temp folders, under one of its own."""

    root: Path
    checkpoints: list[str] = field(default_factory=list)

    @property
    def input(self) -> Path:
        return self.root / "input"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def temp(self) -> Path:
        return self.root / "temp"

    def by_type(self, kind: str) -> Path | None:
        return {"input": self.input, "output": self.output, "temp": self.temp}.get(kind)

    def input_images(self) -> list[str]:
        """LoadImage's choices, as ComfyUI lists them: the picture files directly in the input folder."""
        try:
            names = [e.name for e in os.scandir(self.input) if e.is_file()]
        except OSError:
            return []
        return sorted(n for n in names if n.lower().endswith(IMAGE_EXTENSIONS))


def checkpoint_names(model_path: str | None) -> list[str]:
    """CheckpointLoaderSimple's choices: the weights the agent named in LLMGW_COMFYUI_MODEL.

    A file is listed by its name; a folder (a repository's snapshot) by each
    weights file in it, as "folder/relative/path", which is how ComfyUI lists
    files in sub-folders of models/checkpoints. Without the variable the stand-in
    offers one made-up checkpoint, so a graph can still be run by hand.
    """
    if not model_path:
        return ["sim.safetensors"]
    path = Path(model_path)
    if path.is_dir():
        found = sorted(str(p.relative_to(path.parent)) for p in path.rglob("*")
                       if p.is_file() and p.name.lower().endswith(WEIGHT_EXTENSIONS))
        return found or [path.name]
    return [path.name]


Spec = list[Any]  # [type] or [type, options], as /object_info writes an input


@dataclass
class Exec:
    """What a running node is given besides its inputs: the prompt, the folders, and its progress."""

    prompt_id: str
    prompt: dict[str, Any]
    extra_data: dict[str, Any]
    folders: Folders
    step_seconds: float
    fail_word: str | None
    previews: bool
    progress: Callable[[str, int, int, bytes | None], Awaitable[None]]
    interrupted: Callable[[], bool]


Run = Callable[[Exec, str, dict[str, Any]], Awaitable[tuple[tuple[Any, ...], dict[str, list[Any]] | None]]]


@dataclass(frozen=True)
class NodeClass:
    name: str
    display_name: str
    category: str
    description: str
    inputs: Callable[[Folders], dict[str, dict[str, Any]]]  # required and optional: Spec; hidden: a type
    returns: tuple[str, ...]
    run: Run
    return_names: tuple[str, ...] | None = None
    output_node: bool = False
    # Inputs ComfyUI checks with the class's VALIDATE_INPUTS instead of its combo list; the function
    # answers True or the reason, as ComfyUI's does.
    validate: Callable[[Folders, dict[str, Any]], bool | str] | None = None
    validated_inputs: tuple[str, ...] = ()
    # IS_CHANGED: a value that changes when the node's result would though its inputs do not (a file).
    changed: Callable[[Folders, dict[str, Any]], str] | None = None

    def info(self, folders: Folders) -> dict[str, Any]:
        """This class as ComfyUI's GET /object_info describes it."""
        inputs = self.inputs(folders)
        return {
            "input": inputs,
            "input_order": {k: list(v) for k, v in inputs.items()},
            "output": list(self.returns),
            "output_is_list": [False] * len(self.returns),
            "output_name": list(self.return_names or self.returns),
            "name": self.name,
            "display_name": self.display_name,
            "description": self.description,
            "python_module": "comfy_extras.nodes_primitive" if self.category == "utils/primitive" else "nodes",
            "category": self.category,
            "output_node": self.output_node,
        }


# -- the pictures


@functools.cache
def _shift(by: int) -> bytes:
    return bytes((i + by) & 255 for i in range(256))


def draw(text: str, seed: int, width: int, height: int, index: int, source: str = "", denoise: float = 1.0) -> bytes:
    """The RGB bytes of a sampled picture: colour gradients seeded by a hash of what was asked.

    A row is the first row shifted by a per-row amount through bytes.translate,
    so a 1024 × 1024 picture costs milliseconds, not a second of Python.
    """
    key = json.dumps([text, seed, width, height, index, source, round(denoise, 4)]).encode()
    d = hashlib.blake2b(key, digest_size=16).digest()
    base, spans, vspan = d[0:3], [64 + d[3 + c] * 2 for c in range(3)], 32 + d[6]
    first = bytes((base[c] + x * spans[c] // width) & 255 for x in range(width) for c in range(3))
    return b"".join(first.translate(_shift(y * vspan // height & 255)) for y in range(height))


def grey(width: int, height: int) -> bytes:
    """An unsampled latent decodes to a flat grey, as an empty latent does through a real VAE."""
    return b"\x80" * (width * height * 3)


def picture_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG or JPEG, from its header; ValueError for other files."""
    if data.startswith(b"\x89PNG"):
        return size(data)
    if data.startswith(b"\xff\xd8"):
        at = 2
        while at + 9 < len(data):
            if data[at] != 0xFF:
                at += 1
                continue
            marker = data[at + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                at += 1 if marker == 0xFF else 2
                continue
            (length,) = struct.unpack_from(">H", data, at + 2)
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack_from(">HH", data, at + 5)
                return int(w), int(h)
            at += 2 + length
        raise ValueError("a JPEG without a frame header")
    raise ValueError("the stand-in reads PNG and JPEG pictures only")


# -- the nodes' work


async def _checkpoint(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    name = i["ckpt_name"]
    return (("MODEL", name), ("CLIP", name), ("VAE", name)), None


async def _clip_text(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    return ([str(i["text"])],), None


async def _empty_latent(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    return (Latent(i["width"] // 8 * 8, i["height"] // 8 * 8, i["batch_size"]),), None


async def _ksampler(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    latent: Latent = i["latent_image"]
    positive, negative = list(i["positive"]), list(i["negative"])
    steps = int(i["steps"])
    if latent.width * latent.height * latent.batch > MOST_PIXELS:
        raise NodeFailed("torch.OutOfMemoryError",
                         f"Allocation on device: {latent.batch} × {latent.width}×{latent.height} is more than the "
                         f"stand-in draws ({MOST_PIXELS} pixels a batch)")
    word = ex.fail_word
    fails = bool(word) and any(word in t for t in positive + negative)
    for step in range(steps):
        if ex.interrupted():
            raise Interrupted()
        if fails and step >= steps // 2:
            # Halfway, as a sampler that runs out of memory or meets a NaN does: after some progress was seen.
            raise NodeFailed("RuntimeError", f"the stand-in fails a sampler whose prompt holds {word!r} "
                                             f"(--fail-word), at step {step + 1} of {steps}")
        await asyncio.sleep(ex.step_seconds)
        preview = encode_png(8, 8, draw(" ".join(positive), i["seed"], 8, 8, step)) if ex.previews else None
        await ex.progress(node, step + 1, steps, preview)
    drawn = (" ".join(positive), int(i["seed"]), float(i["denoise"]))
    return (Latent(latent.width, latent.height, latent.batch, latent.source, drawn),), None


def _decode_one(latent: Latent, index: int) -> Picture:
    w, h = latent.width, latent.height
    if latent.drawn is None:
        return Picture(w, h, grey(w, h))
    text, seed, denoise = latent.drawn
    source = latent.source.digest if latent.source else ""
    return Picture(w, h, draw(text, seed, w, h, index, source, denoise if latent.source else 1.0))


async def _vae_decode(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    latent: Latent = i["samples"]
    pictures = await asyncio.to_thread(lambda: [_decode_one(latent, n) for n in range(latent.batch)])
    return (pictures,), None


async def _vae_encode(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    pictures = i["pixels"]
    first = pictures[0]
    # ComfyUI crops the pixels to multiples of 8 before encoding (vae_encode_crop_pixels).
    w, h = first.width // 8 * 8, first.height // 8 * 8
    digest = first.digest if isinstance(first, Source) else hashlib.sha256(first.rgb).hexdigest()
    return (Latent(w, h, len(pictures), Source(w, h, digest)),), None


async def _load_image(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    path = ex.folders.input / i["image"]
    data = await asyncio.to_thread(path.read_bytes)
    try:
        w, h = picture_size(data)
    except ValueError as e:
        raise NodeFailed("PIL.UnidentifiedImageError", f"cannot identify image file {i['image']!r}: {e}") from None
    return ([Source(w, h, hashlib.sha256(data).hexdigest())], None), None


def _save_path(folders: Folders, prefix: str, width: int, height: int, out: Path) -> tuple[Path, str, int, str]:
    """ComfyUI's folder_paths.get_save_image_path: the folder, the name, the next counter and the subfolder."""
    prefix = prefix.replace("%width%", str(width)).replace("%height%", str(height))
    norm = os.path.normpath(prefix)
    subfolder, name = os.path.dirname(norm), os.path.basename(norm)
    folder = out / subfolder
    if os.path.commonpath((str(out), os.path.abspath(folder))) != str(out):
        raise NodeFailed("Exception", "**** ERROR: Saving image outside the output folder is not allowed."
                                      f"\n full_output_folder: {os.path.abspath(folder)}\n         output_dir: {out}")
    counter = 1
    try:
        for entry in os.listdir(folder):
            head, rest = entry[:len(name) + 1], entry[len(name) + 1:]
            if head[:-1] == name and head[-1:] == "_":
                try:
                    counter = max(counter, int(rest.split("_")[0]) + 1)
                except ValueError:
                    pass
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True)
    return folder, name, counter, subfolder


def _save(ex: Exec, pictures: list[Any], prefix: str, out: Path, kind: str) -> dict[str, list[Any]]:
    if not pictures:
        return {"images": []}
    pictures = [p if isinstance(p, Picture) else Picture(p.width, p.height, grey(p.width, p.height))
                for p in pictures]
    folder, name, counter, subfolder = _save_path(ex.folders, prefix, pictures[0].width, pictures[0].height, out)
    plain = {"prompt": json.dumps(ex.prompt)}
    for key, value in (ex.extra_data.get("extra_pnginfo") or {}).items():
        plain[str(key)] = json.dumps(value)
    results = []
    for n, p in enumerate(pictures):
        file = f"{name.replace('%batch_num%', str(n))}_{counter:05}_.png"
        (folder / file).write_bytes(encode_png(p.width, p.height, p.rgb, plain=plain))
        results.append({"filename": file, "subfolder": subfolder, "type": kind})
        counter += 1
    return {"images": results}


async def _save_image(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, list[Any]]]:
    ui = await asyncio.to_thread(_save, ex, i["images"], str(i["filename_prefix"]), ex.folders.output, "output")
    return (), ui


async def _preview_image(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, list[Any]]]:
    prefix = "ComfyUI_temp_" + "".join(random.choice(string.ascii_lowercase) for _ in range(5))  # noqa: S311
    ui = await asyncio.to_thread(_save, ex, i["images"], prefix, ex.folders.temp, "temp")
    return (), ui


async def _primitive(ex: Exec, node: str, i: dict[str, Any]) -> tuple[tuple[Any, ...], None]:
    return (i["value"],), None


def _image_valid(folders: Folders, i: dict[str, Any]) -> bool | str:
    name = str(i.get("image", ""))
    path = (folders.input / name).resolve()
    if ".." in Path(name).parts or not path.is_relative_to(folders.input.resolve()) or not path.is_file():
        return f"Invalid image file: {name}"
    return True


def _image_changed(folders: Folders, i: dict[str, Any]) -> str:
    try:
        return hashlib.sha256((folders.input / str(i["image"])).read_bytes()).hexdigest()
    except OSError:
        return ""


_INT = "INT"
_SEED = [_INT, {"default": 0, "min": 0, "max": 0xFFFFFFFFFFFFFFFF, "control_after_generate": True,
                "tooltip": "The random seed used for creating the noise."}]
_SIZE = [_INT, {"default": 512, "min": 16, "max": MAX_RESOLUTION, "step": 8}]
_HIDDEN: dict[str, Any] = {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}  # hidden inputs: a bare type
_BIG = 0x7FFFFFFFFFFFFFFF  # sys.maxsize, which ComfyUI's primitives take as their limits

NODES: dict[str, NodeClass] = {n.name: n for n in [
    NodeClass("CheckpointLoaderSimple", "Load Checkpoint", "loaders",
              "Loads a diffusion model checkpoint, diffusion models are used to denoise latents.",
              lambda f: {"required": {"ckpt_name": [list(f.checkpoints),
                                                    {"tooltip": "The name of the checkpoint (model) to load."}]}},
              ("MODEL", "CLIP", "VAE"), _checkpoint),
    NodeClass("CLIPTextEncode", "CLIP Text Encode (Prompt)", "conditioning",
              "Encodes a text prompt using a CLIP model into an embedding that can be used to guide the diffusion "
              "model towards generating specific images.",
              lambda f: {"required": {"text": ["STRING", {"multiline": True, "dynamicPrompts": True}],
                                      "clip": ["CLIP"]}},
              ("CONDITIONING",), _clip_text),
    NodeClass("EmptyLatentImage", "Empty Latent Image", "latent",
              "Create a new batch of empty latent images to be denoised via sampling.",
              lambda f: {"required": {"width": _SIZE, "height": _SIZE,
                                      "batch_size": [_INT, {"default": 1, "min": 1, "max": 4096}]}},
              ("LATENT",), _empty_latent),
    NodeClass("KSampler", "KSampler", "sampling",
              "Uses the provided model, positive and negative conditioning to denoise the latent image.",
              lambda f: {"required": {
                  "model": ["MODEL"], "seed": _SEED,
                  "steps": [_INT, {"default": 20, "min": 1, "max": 10000}],
                  "cfg": ["FLOAT", {"default": 8.0, "min": 0.0, "max": 100.0, "step": 0.1, "round": 0.01}],
                  "sampler_name": [SAMPLERS], "scheduler": [SCHEDULERS],
                  "positive": ["CONDITIONING"], "negative": ["CONDITIONING"], "latent_image": ["LATENT"],
                  "denoise": ["FLOAT", {"default": 1.0, "min": 0.0, "max": 1.0, "step": 0.01}]}},
              ("LATENT",), _ksampler),
    NodeClass("VAEDecode", "VAE Decode", "latent", "Decodes latent images back into pixel space images.",
              lambda f: {"required": {"samples": ["LATENT"], "vae": ["VAE"]}}, ("IMAGE",), _vae_decode),
    NodeClass("VAEEncode", "VAE Encode", "latent", "",
              lambda f: {"required": {"pixels": ["IMAGE"], "vae": ["VAE"]}}, ("LATENT",), _vae_encode),
    NodeClass("SaveImage", "Save Image", "image", "Saves the input images to your ComfyUI output directory.",
              lambda f: {"required": {"images": ["IMAGE", {"tooltip": "The images to save."}],
                                      "filename_prefix": ["STRING", {"default": "ComfyUI"}]},
                         "hidden": dict(_HIDDEN)},
              (), _save_image, output_node=True),
    NodeClass("PreviewImage", "Preview Image", "image", "Saves the input images to your ComfyUI output directory.",
              lambda f: {"required": {"images": ["IMAGE"]}, "hidden": dict(_HIDDEN)},
              (), _preview_image, output_node=True),
    NodeClass("LoadImage", "Load Image", "image", "",
              lambda f: {"required": {"image": [f.input_images(), {"image_upload": True}]}},
              ("IMAGE", "MASK"), _load_image,
              validate=_image_valid, validated_inputs=("image",), changed=_image_changed),
    NodeClass("PrimitiveString", "String", "utils/primitive", "",
              lambda f: {"required": {"value": ["STRING", {}]}}, ("STRING",), _primitive),
    NodeClass("PrimitiveStringMultiline", "String (Multiline)", "utils/primitive", "",
              lambda f: {"required": {"value": ["STRING", {"multiline": True}]}}, ("STRING",), _primitive),
    NodeClass("PrimitiveInt", "Int", "utils/primitive", "",
              lambda f: {"required": {"value": [_INT, {"min": -_BIG, "max": _BIG, "control_after_generate": True}]}},
              ("INT",), _primitive),
    NodeClass("PrimitiveFloat", "Float", "utils/primitive", "",
              lambda f: {"required": {"value": ["FLOAT", {"min": -_BIG, "max": _BIG}]}}, ("FLOAT",), _primitive),
    NodeClass("PrimitiveBoolean", "Boolean", "utils/primitive", "",
              lambda f: {"required": {"value": ["BOOLEAN", {}]}}, ("BOOLEAN",), _primitive),
]}
