"""The engines llmgw ships, registered through the same hook a site's own engine would use."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.engines.base import Engine
from llmgw.engines.comfyui import ComfyUI
from llmgw.engines.freetoken import FreeToken
from llmgw.engines.llamacpp import LlamaCpp
from llmgw.engines.sglang import SGLang
from llmgw.engines.sim import Sim
from llmgw.engines.strata import Strata
from llmgw.engines.trtllm import TRTLLM
from llmgw.engines.vllm import VLLM


def shipped() -> list[Engine]:
    """llmgw's engines: what its `llmgw.engines` entry point names (llmgw/plugins.py)."""
    return [LlamaCpp(), Sim(), VLLM(), SGLang(), TRTLLM(), ComfyUI(), Strata(), FreeToken()]


def register_engines(register: Callable[[Engine], None]) -> None:
    for engine in shipped():
        register(engine)
