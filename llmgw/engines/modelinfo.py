"""What an adapter reads about a model: its file's kind from a source, and how long a context it was trained for.

Read from the weights' own metadata — a GGUF's header, a checkpoint's
config.json — never by loading them: the agent checks a profile before the
engine starts, and a context longer than the model's is refused then rather
than found as an engine that starts and answers badly past it.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote


def file_name(source: str) -> str:
    """The file a source names: without ?query, #fragment, an hf: source's @revision, or escapes."""
    name = unquote(source.split("?", 1)[0].split("#", 1)[0]).strip().rstrip("/")
    if name.lower().startswith("hf:"):
        last = name.rsplit("/", 1)[-1]
        if "@" in last:
            name = name[: len(name) - len(last)] + last.split("@", 1)[0]
        elif "@" in name:
            name = name.rsplit("@", 1)[0]  # hf:org/repo/file@refs/pr/1: a revision with a slash
    return name.rsplit("/", 1)[-1]


def is_gguf(name: str) -> bool:
    return file_name(name).lower().endswith(".gguf")


def hub_id(path: str) -> bool:
    """Whether a model path is a Hugging Face id (org/name) the engine downloads itself, not a file or directory.

    org/name:Q4_K_M is a GGUF inside a repository; a path that exists here
    is the node's, whatever it looks like.
    """
    if not path or path.startswith(("/", ".", "~")) or "://" in path or ":" in path:
        return False
    if path.count("/") != 1 or not all(path.split("/")):
        return False
    return not os.path.exists(path)


# --- GGUF -------------------------------------------------------------------------------------

_GGUF_MAGIC = b"GGUF"
# Value types of GGUF's metadata and the bytes one takes; 8 is a string, 9 an array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}
# A header is read only this far: the keys wanted come before the vocabulary
# in every file llama.cpp's tools write, and a broken file must not be read
# to its end (tens of GB) looking for them.
_HEADER_LIMIT = 64 << 20


class _Reader:
    def __init__(self, f: BinaryIO) -> None:
        self.f = f

    def take(self, n: int) -> bytes:
        if n > _HEADER_LIMIT:
            raise ValueError("GGUF header names more than it can hold")
        b = self.f.read(n)
        if len(b) != n or self.f.tell() > _HEADER_LIMIT:
            raise ValueError("GGUF header ends early")
        return b

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", errors="replace")

    def skip(self, kind: int) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == 8:
            self.take(self.u64())
        elif kind == 9:
            inner, count = self.u32(), self.u64()
            if inner in _FIXED:
                self.take(_FIXED[inner] * count)
            else:
                for _ in range(count):
                    self.skip(inner)
        else:
            raise ValueError(f"unknown GGUF value type {kind}")


def gguf_path(model_path: str) -> Path | None:
    """The GGUF a model path names: the file, or in a directory the only one or a split set's first part."""
    p = Path(model_path)
    if p.is_file():
        return p
    if p.is_dir():
        files = sorted(x for x in p.iterdir() if x.name.lower().endswith(".gguf") and "mmproj" not in x.name.lower())
        firsts = [x for x in files if "-00001-of-" in x.name]
        if len(firsts) == 1:
            return firsts[0]
        if len(files) == 1:
            return files[0]
    return None


def gguf_context_length(model_path: str) -> int:
    """The context a GGUF's model was trained for (`<architecture>.context_length`); 0 when it does not say."""
    path = gguf_path(model_path)
    if path is None:
        return 0
    try:
        with open(path, "rb") as f:
            r = _Reader(f)
            if r.take(4) != _GGUF_MAGIC:
                return 0
            version = r.u32()
            if version < 2:
                return 0
            r.u64()  # tensors
            count = r.u64()
            arch, lengths = "", {}
            for _ in range(count):
                key, kind = r.string(), r.u32()
                if key == "general.architecture" and kind == 8:
                    arch = r.string()
                elif key.endswith(".context_length") and kind in _INTS:
                    lengths[key] = struct.unpack(_INTS[kind], r.take(_FIXED[kind]))[0]
                else:
                    r.skip(kind)
                if arch and f"{arch}.context_length" in lengths:
                    return int(lengths[f"{arch}.context_length"])
    except (OSError, ValueError, struct.error):
        return 0
    return 0


def gguf_metadata(head: bytes) -> dict[str, int | str]:
    """The numbers and names a GGUF's header holds, from its first bytes (a ranged read of a file not yet
    fetched): what its header says up to where `head` ends, arrays (the vocabulary) skipped. {} when it is
    not a GGUF."""
    import io

    found: dict[str, int | str] = {}
    r = _Reader(io.BytesIO(head))
    try:
        if r.take(4) != _GGUF_MAGIC or r.u32() < 2:
            return {}
        r.u64()  # tensors
        for _ in range(r.u64()):
            key, kind = r.string(), r.u32()
            if kind in _INTS:
                found[key] = struct.unpack(_INTS[kind], r.take(_FIXED[kind]))[0]
            elif kind == 8:
                found[key] = r.string()
            else:
                r.skip(kind)
    except (ValueError, struct.error):
        pass  # the header runs on past what was read: what came before stands
    return found


# --- Hugging Face checkpoints ------------------------------------------------------------------

_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


def hf_context_length(model_path: str) -> int:
    """The context a checkpoint directory's config.json says its model takes, scaled rope included; 0 if unknown.

    A rope scaling factor lengthens it as vLLM reckons (Qwen's YaRN ×4 of
    32768 is 131072); counting it short would refuse a context the engine
    serves.
    """
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    if not isinstance(config, dict):
        return 0
    for part in (config, config.get("text_config"), config.get("llm_config")):
        if not isinstance(part, dict):
            continue
        for key in _LENGTH_KEYS:
            value = part.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                scaling = part.get("rope_scaling")
                scaling = scaling if isinstance(scaling, dict) else {}
                factor = scaling.get("factor")
                if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
                    original = scaling.get("original_max_position_embeddings")
                    base = original if isinstance(original, int) and original > 0 else value
                    return max(value, int(base * factor))
                return value
    return 0
