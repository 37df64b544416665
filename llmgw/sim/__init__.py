"""An OpenAI-compatible engine that answers deterministic words at a set speed; and a ComfyUI stand-in.

For tests and benchmarks: a router can be pointed at it as at vLLM (the same
paths, JSON shapes, /metrics names and error sentences), and told to fail in
the ways real engines fail. docs/sim-engine.md has the rules it answers by.
With --comfyui (comfyui.py) it speaks ComfyUI's HTTP and websocket protocol
instead, running workflows of ComfyUI's core nodes into real PNG files.
"""

from llmgw.sim.comfyui import ComfyConfig, serve_comfyui
from llmgw.sim.config import SimConfig
from llmgw.sim.prefixcache import KvEventsConfigError, PrefixCache, Publisher
from llmgw.sim.server import SimError, bind, serve

__all__ = ["ComfyConfig", "KvEventsConfigError", "PrefixCache", "Publisher", "SimConfig", "SimError", "bind", "serve",
           "serve_comfyui"]
