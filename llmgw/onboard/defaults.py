"""An install's defaults that commands' help names: the starter models, the listen addresses, the mirror's.

A module of its own, with a NamedTuple rather than a dataclass, because
`llmgw --help` builds `server init`'s and `setup`'s flags, whose help says
these: parts.py's dataclasses bring inspect, 8 ms of the 150 the command may
take (issue 26).
"""

from __future__ import annotations

from typing import NamedTuple


class Starter(NamedTuple):
    key: str
    label: str
    source: str
    engine: str
    size: str


STARTERS: tuple[Starter, ...] = (
    Starter("sim", "Simulated model (no internet, no weights)", "sim", "sim", "none"),
    Starter("qwen2.5-0.5b", "Qwen2.5 0.5B", "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
            "llamacpp", "0.5 GB"),
    Starter("qwen2.5-1.5b", "Qwen2.5 1.5B", "hf:Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf",
            "llamacpp", "1.1 GB"),
    Starter("qwen2.5-3b", "Qwen2.5 3B", "hf:Qwen/Qwen2.5-3B-Instruct-GGUF/qwen2.5-3b-instruct-q4_k_m.gguf",
            "llamacpp", "2.1 GB"),
    Starter("qwen3-4b", "Qwen3 4B", "hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf", "llamacpp", "2.5 GB"),
    Starter("qwen3-8b", "Qwen3 8B", "hf:Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf", "llamacpp", "5.0 GB"),
    Starter("qwen3-14b", "Qwen3 14B", "hf:Qwen/Qwen3-14B-GGUF/Qwen3-14B-Q4_K_M.gguf", "llamacpp", "9.0 GB"),
)

LISTEN_DEFAULTS = {"client": ":8080", "agent": ":7443", "admin": "127.0.0.1:9090", "metrics": ":9091"}
# The model mirror's, where setup installs it (MirrorConfig's own defaults).
MIRROR_DIR = "/var/cache/llmgw/mirror"
MIRROR_LISTEN = ":8600"
