"""Weights in a pickle format, known by their names and refused.

Loading a Python pickle runs whatever it holds, as the engine's user, on the
node: that is how the malicious models found on Hugging Face work, and
nothing in a file's size or name beyond its extension says so. safetensors
and GGUF hold only tensors and are read, never run. A model whose weights
have no other form says `allow_pickle: true` in the catalog, on purpose.

Read by the catalog when a model is added and by the agent when it fetches
(agent/weights/errors.py's refuse_pickle), so it sits below both.
"""

from __future__ import annotations

from urllib.parse import unquote

# PyTorch's pickle formats and pickle's own. A .bin beside safetensors is
# the same model in pickle form (pytorch_model.bin).
PICKLE_EXTENSIONS = (".bin", ".pt", ".pt2", ".pth", ".ckpt", ".pkl", ".pickle")


def _cut(name: str) -> str:
    for mark in ("?", "#"):
        name = name.split(mark, 1)[0]
    return name


def is_pickle(name: str) -> bool:
    """Whether a file name, URL or source names a file in a pickle format.

    What follows `?` or `#` is not the file's name: `model.bin?download=true`
    is still model.bin, on a URL or an hf: source alike; nor is an hf:
    source's `@revision`; percent-escapes are read as the server will read
    them (`model%2Ebin`), and case does not matter (`X.PT`).
    """
    name = _cut(name)
    name = _cut(unquote(name))
    name = name.strip().rstrip("/")
    if name.lower().startswith("hf:"):
        last = name.rsplit("/", 1)[-1]
        if "@" in last:
            name = name[: len(name) - len(last)] + last.split("@", 1)[0]
        elif "@" in name:
            # hf:org/repo/file@refs/pr/1: the revision holds a slash.
            name = name.rsplit("@", 1)[0]
    return name.lower().endswith(PICKLE_EXTENSIONS)
