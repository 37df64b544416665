"""ComfyUI: picture and 3D models, run as its own main.py on one card or on CPUs.

ComfyUI is not an OpenAI server: it says it is up at /system_stats, and what
it makes is asked for as a workflow. The agent gives it where it listens,
its card, and the fetched model's path in LLMGW_COMFYUI_MODEL for the
workflow side to load; everything that moves where ComfyUI reads or writes,
or has it fetch and run code (its manager's custom nodes), is refused. Its
argparse takes beginnings of flags (`--li` is `--listen`). It has no API
key: a ComfyUI shard answers whoever reaches its port.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from llmgw.engines.base import Binary, EngineError, Launch, ProfileError, check_common, cuda_env
from llmgw.engines.refusals import (
    LISTENS,
    LOADS_FILE,
    PICKS_CARD,
    SENDS_ELSEWHERE,
    TLS_FILES,
    WRITES_FILES,
    Flag,
    check_args,
    check_env,
    refused,
)
from llmgw.protocol import EngineProfile

MODEL_ENV = "LLMGW_COMFYUI_MODEL"

FLAGS: tuple[Flag, ...] = (
    refused(LISTENS, "--listen"),
    refused(LISTENS, "--port"),
    refused(PICKS_CARD, "--cuda-device"),
    refused(WRITES_FILES, "--output-directory"),
    refused(WRITES_FILES, "--temp-directory"),
    refused(WRITES_FILES, "--user-directory"),
    refused(WRITES_FILES, "--base-directory"),
    refused(LOADS_FILE, "--input-directory"),
    refused(LOADS_FILE, "--extra-model-paths-config"),
    refused("serves the web interface from a directory of the node's", "--front-end-root"),
    refused("downloads a web interface from the internet, which the agent neither pins nor checks",
            "--front-end-version"),
    refused("installs custom nodes, which are Python, from the internet and loads them (ComfyUI's manager)",
            "--enable-manager"),
    refused("moves ComfyUI's database, a file or another server", "--database-url"),
    refused("lets any web page a person opens call the engine", "--enable-cors-header"),
    refused(SENDS_ELSEWHERE, "--comfy-api-base"),
    refused(TLS_FILES, "--tls-keyfile"),
    refused(TLS_FILES, "--tls-certfile"),
)


def _program(binary: Binary) -> str | Sequence[str]:
    """The ComfyUI named: refused when none is (None, "" or an empty list)."""
    if not binary:
        raise EngineError("comfyui: no ComfyUI is installed or named on this node (its main.py)")
    return binary


def _main_py(program: str | Sequence[str]) -> Path:
    path = Path(program if isinstance(program, str) else program[-1])
    return path / "main.py" if path.is_dir() else path


def interpreter(main_py: Path) -> str:
    """The Python of ComfyUI's own environment, beside main.py (.venv or venv), else the agent's."""
    for name in (".venv", "venv"):
        python = main_py.parent / name / "bin" / "python"
        if python.exists():
            return str(python)
    return sys.executable


class ComfyUI:
    name = "comfyui"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        if len(profile.gpus) > 1:
            raise ProfileError("gpus",
                               f"comfyui runs on one GPU a shard, or none; the profile names {len(profile.gpus)}")
        check_args(self.name, profile.args, FLAGS, abbreviations=True)
        check_env(self.name, profile.env)

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`PYTHON main.py --listen HOST --port PORT` with `binary` as ComfyUI's main.py (or its directory), or
        a program and its arguments ending in main.py. No key: api_key_file is not used."""
        self.validate(profile)
        program = _program(binary)
        main_py = _main_py(program)
        start = [interpreter(main_py), str(main_py)] if isinstance(program, str) else [str(b) for b in program]
        argv = start + ["--listen", host, "--port", str(port)]
        if not profile.gpus:
            argv += ["--cpu"]
        argv += list(profile.args)
        env = {**profile.env, **cuda_env(profile)}
        if model_path:
            env[MODEL_ENV] = model_path
        return Launch(argv=argv, env=env, health_path="/system_stats", model=profile.model, metrics_path="")

    def installed(self, binary: Binary = None) -> str | None:
        try:
            main_py = _main_py(_program(binary))
        except EngineError:
            return None
        if not main_py.is_file():
            return None
        # ComfyUI states its version in comfyui_version.py beside main.py.
        try:
            text = (main_py.parent / "comfyui_version.py").read_text(encoding="utf-8")
        except OSError:
            return "unknown"
        m = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
        return m.group(1) if m else "unknown"

