"""The Engine seam: what every engine adapter offers, and what they share.

An adapter knows one engine's command line: what it is given from a shard's
profile, which of a profile's own arguments and variables it refuses, and how
to tell whether the engine is installed. It starts nothing — the supervisor
runs the `Launch` it builds — so each adapter is tested for the exact argv a
person would see in `ps`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

# For the annotations only: `llmgw llama-server`'s flags come from this
# package (llamacpp_runner), and the agent protocol's messages cost more to
# import than the rest of `llmgw --help` (issue 26).
if TYPE_CHECKING:
    from llmgw.protocol import EngineProfile

ROLES = ("", "judge", "embedding")

Binary = str | Sequence[str] | None
"""The engine's program: a path or a name on PATH, or a program and its first arguments
(`["/usr/bin/python3", "-m", "llmgw", "llama-server"]`); None is the engine's default."""


class EngineError(Exception):
    """An engine cannot be used as asked: unknown, not installed, or its command cannot be built."""


class UnknownEngine(EngineError, LookupError):
    """A name no registered engine has."""


class ProfileError(EngineError):
    """A profile an engine refuses, naming the field (`args[2]`, `env[LD_PRELOAD]`, `gpus`, …) and why."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message


@dataclass(frozen=True)
class Launch:
    """One engine process, as the supervisor starts it.

    `env` is what the engine is given on top of the environment the
    supervisor starts it with: the profile's own variables, already checked,
    and what the adapter sets (CUDA_VISIBLE_DEVICES, an API key for an
    engine that reads its key from there rather than from a command line
    every user on the node can read). It may hold a key: never log it.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    """Where the engine says it is up. At /health readiness also wants the model listed in /v1/models; at any other
    path (an engine that is no OpenAI server, as ComfyUI) a 200 is enough (agent/supervisor/readiness.py)."""
    model: str = ""
    """The name the engine serves the model under: what /v1/models lists and requests name."""
    metrics_path: str = ""
    """Its Prometheus text, which the router reads for load; "" when it serves none."""
    kv_events: str = ""
    """The ZeroMQ address its KV-cache events are published on (engines/kvevents.py); "" when none."""


@runtime_checkable
class Engine(Protocol):
    """One engine the agent can run. Built-ins are registered in default_engines.py, as a site's own would be."""

    name: str
    """As the catalog and agent.yaml spell it: llamacpp, vllm, …"""

    needs_weights: bool
    """False for an engine that serves without a model's files (sim): the agent fetches nothing for it."""

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        """Raise ProfileError naming the field when this engine would refuse the profile, or must not be given it.

        With `model_path` (the weights on this node), what can only be known
        from them is checked too: a context longer than the model was
        trained for.
        """
        ...

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """The engine's command for one shard. Validates the profile first (ProfileError); EngineError when the
        engine's program is not there to be named (binary None and no default)."""
        ...

    def installed(self, binary: Binary = None) -> str | None:
        """The engine's version when this node can run it ("unknown" when it runs but does not say); None if not."""
        ...


# --- checks every adapter makes ------------------------------------------------------------


def check_common(engine: str, profile: EngineProfile) -> None:
    """The fields every engine reads the same way."""
    if profile.engine != engine:
        raise ProfileError("engine", f"the profile is for {profile.engine!r}, not {engine}")
    if not profile.model or profile.model != profile.model.strip() or any(c.isspace() for c in profile.model):
        raise ProfileError("model",
                           f"expected the name the model is served under, without spaces, got {profile.model!r}")
    for name in ("context_length", "slots", "cpu_cores", "memory_mb"):
        value = getattr(profile, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProfileError(name, f"expected 0 or a whole number above it, got {value!r}")
    seen: set[int] = set()
    for i, gpu in enumerate(profile.gpus):
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            raise ProfileError(f"gpus[{i}]", f"expected a GPU's index (0, 1, …), got {gpu!r}")
        if gpu in seen:
            raise ProfileError(f"gpus[{i}]", f"GPU {gpu} is named twice")
        seen.add(gpu)
    if profile.role not in ROLES:
        raise ProfileError("role", f"expected judge, embedding or nothing, got {profile.role!r}")
    for i, arg in enumerate(profile.args):
        if not isinstance(arg, str):
            raise ProfileError(f"args[{i}]", f"expected text, got {arg!r}; write it in quotes")
    for key, value in profile.env.items():
        if not isinstance(value, str):
            raise ProfileError(f"env[{key}]", f"expected text, got {value!r}; write it in quotes")


def need_gpus(engine: str, profile: EngineProfile, *, most: int = 0) -> None:
    """An engine that runs on NVIDIA cards only; `most` caps how many one shard may have (0: any)."""
    if not profile.gpus:
        raise ProfileError("gpus", f"{engine} runs on NVIDIA GPUs; give the profile at least one (gpus: [0])")
    if most and len(profile.gpus) > most:
        cards = "one GPU" if most == 1 else f"at most {most} GPUs"
        raise ProfileError("gpus", f"{engine} runs on {cards} a shard; the profile names {len(profile.gpus)}")


def cuda_env(profile: EngineProfile) -> dict[str, str]:
    """The shard's cards, and only them: an engine sees them as 0, 1, … whatever the node calls them.

    Set even when the profile has none (to ""), so a CUDA build does not
    take a card another shard holds.
    """
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in profile.gpus)}


def read_key(api_key_file: str, engine: str) -> str:
    """An API key for an engine that takes it from its environment, read from the agent's key file."""
    try:
        with open(api_key_file, encoding="utf-8") as f:
            key = f.read().strip()
    except OSError as e:
        raise EngineError(f"{engine}: the API key file {api_key_file} cannot be read ({e.strerror})") from None
    if not key or any(c.isspace() for c in key):
        raise EngineError(f"{engine}: the API key file {api_key_file} holds no key on one line")
    return key


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_trained_context(profile: EngineProfile, trained: int, where: str) -> None:
    """Refuse a context longer than the model was trained for: past it the engine still answers, badly."""
    if trained and profile.context_length > trained:
        raise ProfileError(
            "context_length",
            f"{profile.context_length} tokens is longer than {profile.model} was trained for ({trained}, as {where} "
            f"says); give {trained} or less")


def loopback_port() -> int:
    """A free port on 127.0.0.1, from the kernel's ephemeral range (which `llmgw firewall on` closes to other
    machines): where an engine's second socket meets the agent, its KV events."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def program(binary: Binary, default: str | None, engine: str, setting: str = "") -> list[str]:
    """The start of the engine's argv from `binary`, or its default; EngineError when it has neither."""
    if binary is None or binary == "" or (not isinstance(binary, str) and len(binary) == 0):
        if default is None:
            where = f" ({setting})" if setting else ""
            raise EngineError(f"{engine}: no {engine} is installed or named on this node{where}")
        return [default]
    if isinstance(binary, str):
        return [binary]
    return [str(part) for part in binary]
