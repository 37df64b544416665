"""agent.yaml: a node's configuration, read by `llmgw agent` at start.

Every key here is the node's own. What runs on the node is decided by the
control plane; this file says how to reach it and where the node keeps
things. The string under each field is that key's documentation in
docs/reference.md.
"""

from __future__ import annotations

import difflib
import os
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmgw.config.loader import Invalid, load_file
from llmgw.config.server import LogSettings, check_networks
from llmgw.config.telemetry import TelemetrySettings
from llmgw.config.types import Address, describe
from llmgw.errors import N_

__all__ = [
    "AgentConfig",
    "DiscoverySettings",
    "EngineSettings",
    "KNOWN_ENGINES",
    "LlamaCppSettings",
    "StrataSettings",
    "WeightsSettings",
    "load_agent_config",
]

# The engines an agent can run, for refusing a misspelt name in
# engines.disabled: "vlm" would otherwise disable nothing, silently.
# A new engine under llmgw/engines/ adds its name here.
KNOWN_ENGINES = ("llamacpp", "vllm", "sglang", "trtllm", "comfyui", "strata", "freetoken", "sim")


@dataclass(frozen=True)
class DiscoverySettings:
    skip_gpus: bool = False
    """Report no GPUs at all. A node without an NVIDIA driver is already found to have none; this is for one whose
    driver is broken."""

    nvidia_smi: str = "nvidia-smi"
    """The nvidia-smi command asked about the GPUs when NVML can't be used, by name on PATH or as a full path."""

    dcgm_exporter: str = "http://127.0.0.1:9400/metrics"
    """The dcgm-exporter metrics URL read for how busy each GPU's chip is, on cards older than Hopper. `off` reads none.
    A node without one costs only a refused connection every few minutes."""

    def validate(self) -> None:
        url = self.dcgm_exporter.strip()
        if url.lower() == "off":
            return
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Invalid(
                "dcgm_exporter",
                N_('expected an http:// URL like http://127.0.0.1:9400/metrics, or off, got {dcgm_exporter}'),
                params={"dcgm_exporter": describe(self.dcgm_exporter)}
            )


@dataclass(frozen=True)
class LlamaCppSettings:
    binary: str = ""
    """The llama-server program to run. Empty is the one the agent installs itself, or llama-server on PATH."""


@dataclass(frozen=True)
class PythonEngineSettings:
    binary: str = ""
    """The engine's program (vllm, or its environment's python), installed by the site for its cards. Empty is the
    pinned release the agent installs itself into DATA/engines on first use (docs/engines.md)."""

    index: str = ""
    """An index pip also reads when the agent installs the engine: a site's own copy of PyPI's or PyTorch's. Empty is
    what the release needs: PyTorch's CPU wheels for vLLM's CPU build, nothing else; off is none (pip's own
    configuration alone)."""

    def extra_index(self) -> str | None:
        """The index to give pip: None for the release's own, "" for none."""
        return None if not self.index else "" if self.index.lower() == "off" else self.index

    def validate(self) -> None:
        if self.binary and os.sep in self.binary and not os.path.isabs(self.binary):
            raise Invalid("binary", N_('"{ref}" is not an absolute path'), params={"ref": describe(self.binary)})
        if self.index and self.index.lower() != "off" and urlsplit(self.index).scheme not in ("http", "https"):
            raise Invalid("index", N_("expected an http(s):// URL, got {value}"),
                          params={"value": describe(self.index)})


@dataclass(frozen=True)
class StrataSettings:
    dir: str = ""
    """Strata's source directory, where setup.py and serve/server.py are: a Strata you installed yourself on this node.
    Empty: none, and the node does not offer Strata."""

    python: str = ""
    """The interpreter of Strata's Python environment. Empty is DIR/.venv/bin/python, where Strata's own setup makes
    it. Read only with dir."""

    engine: str = ""
    """The directory of Strata's prebuilt engine, where its strata program and the CUDA libraries it ships are. Empty
    is DIR/engine. Read only with dir."""

    def validate(self) -> None:
        for key in ("dir", "python", "engine"):
            value = getattr(self, key)
            if value and not os.path.isabs(value):
                # An engine runs from a directory of its own, so a relative path would name another place there.
                raise Invalid(key, N_('"{ref}" is not an absolute path'), params={"ref": describe(value)})

    def located(self) -> tuple[str, str, str] | None:
        """(interpreter, source directory, engine directory), or None when no Strata is named."""
        if not self.dir:
            return None
        return (self.python or os.path.join(self.dir, ".venv", "bin", "python"), self.dir,
                self.engine or os.path.join(self.dir, "engine"))


@dataclass(frozen=True)
class ComfyUISettings:
    dir: str = ""
    """ComfyUI's directory, where its main.py is: a ComfyUI installed on this node (docs/media.md). It runs with the
    Python of its own environment beside main.py (.venv or venv), else the agent's. Empty: none, and the node offers
    no ComfyUI."""

    def validate(self) -> None:
        if self.dir and not os.path.isabs(self.dir):
            raise Invalid("dir", N_('"{ref}" is not an absolute path'), params={"ref": describe(self.dir)})


@dataclass(frozen=True)
class EngineSettings:
    user: str = "llmgw-engine"
    """The unprivileged user engines run as when the agent runs as root (made when missing). Empty runs them as the
    agent's own user."""

    listen: str = ""
    """The address engines listen on. Empty is the node's `advertise` address, so an engine is reachable by the control
    planes and nothing else the node has."""

    disabled: list[str] = field(default_factory=list)
    """Engines this node must not run, by name (llamacpp, vllm, sglang, trtllm, comfyui, strata, freetoken, sim); the
    control plane places their models elsewhere."""

    llamacpp: LlamaCppSettings = field(default_factory=LlamaCppSettings)
    """llama.cpp, the engine for GGUF models on CPUs and GPUs."""

    vllm: PythonEngineSettings = field(default_factory=PythonEngineSettings)
    """vLLM, for safetensors models: its CUDA build for shards on cards, its CPU build for shards without."""

    sglang: PythonEngineSettings = field(default_factory=PythonEngineSettings)
    """SGLang, for safetensors models on NVIDIA cards."""

    strata: StrataSettings = field(default_factory=StrataSettings)
    """Strata, for a few mixture-of-experts models with their experts in RAM and the rest on one card
    (docs/engines.md#strata)."""

    comfyui: ComfyUISettings = field(default_factory=ComfyUISettings)
    """ComfyUI, for picture and workflow models (docs/media.md)."""

    def validate(self) -> None:
        for i, name in enumerate(self.disabled):
            if name not in KNOWN_ENGINES:
                near = difflib.get_close_matches(name, KNOWN_ENGINES, n=1, cutoff=0.6)
                tail = f"did you mean {near[0]}?" if near else f"the engines are {', '.join(KNOWN_ENGINES)}"
                raise Invalid(f"disabled[{i}]", N_('unknown engine {name}; {tail}'),
                                                params={"name": describe(name), "tail": tail})


@dataclass(frozen=True)
class WeightsSettings:
    hf_endpoint: str = "https://huggingface.co"
    """Where `hf:` sources are fetched from: Hugging Face, or a mirror speaking its API."""

    hf_token_file: str = ""
    """A file holding a Hugging Face token, for gated models; read at each download."""

    mirror: str = ""
    """The model mirror's address (https://10.0.0.9:8600), for a start the control plane names no mirror for:
    `hf:` and `mirror:` sources are then fetched from it, over the cluster's TLS, and never from Hugging Face. The
    cluster's mirror.url is what the control planes name (docs/mirror.md)."""

    def validate(self) -> None:
        if self.hf_endpoint and urlsplit(self.hf_endpoint).scheme not in ("http", "https"):
            raise Invalid("hf_endpoint", N_("expected an http(s):// URL, got {value}"),
                          params={"value": describe(self.hf_endpoint)})
        if self.mirror and urlsplit(self.mirror).scheme != "https":
            raise Invalid("mirror", N_("expected the mirror's https:// address, like https://10.0.0.9:8600, got "
                                       "{value}"), params={"value": describe(self.mirror)})


@dataclass(frozen=True)
class AgentConfig:
    """A node's agent.yaml."""

    name: str = ""
    """This node's name, as the cluster shows it and placement refers to it. Empty is the host name."""

    control_planes: list[str] = field(default_factory=list)
    """The control planes' agent addresses, HOST:PORT (10.0.0.5:7443), tried in turn until one answers.
    With several, the agent finds the leader through whichever it reaches."""

    data_dir: str = "/var/lib/llmgw-agent"
    """Where the agent keeps its own state: its certificate, and its records of the engines it started."""

    cache_dir: str = "/var/cache/llmgw/weights"
    """Where model weights are kept once fetched, shared by every replica on the node. Put it on the largest fast
    disk."""

    advertise: str = ""
    """The address the control planes reach this node's engines at. Empty is the address this node reaches its control
    plane from."""

    labels: dict[str, str] = field(default_factory=dict)
    """This node's labels, for models' node selectors (`llmgw.role: judge`)."""

    weights: WeightsSettings = field(default_factory=WeightsSettings)
    """Where model weights are fetched from."""

    log: LogSettings = field(default_factory=LogSettings)
    """What the agent writes to its log."""

    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    """How the agent finds out about this node's hardware."""

    engines: EngineSettings = field(default_factory=EngineSettings)
    """Which engines this node runs, and where their programs are."""

    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    """Traces of this node's part in starting replicas (the download, the launch, the engine loading), sent to an
    OpenTelemetry collector. A start its control plane traced is traced here whatever `sample_ratio` says
    (docs/observability.md)."""

    firewall_networks: list[str] = field(default_factory=list)
    """The cluster's networks, as CIDR (10.0.0.0/24, fd00::/64): what `llmgw firewall on` opens this node's engine
    ports to, besides its control planes. Empty is the networks this machine is on (docs/firewall.md)."""

    @property
    def node_name(self) -> str:
        return self.name or socket.gethostname()

    def validate(self) -> None:
        check_networks(self.firewall_networks)
        for i, entry in enumerate(self.control_planes):
            try:
                addr = Address(entry)
            except ValueError:
                addr = None
            if addr is None or not addr.host or addr.port == 0:
                raise Invalid(
                    f"control_planes[{i}]",
                    N_("expected a control plane's address like 10.0.0.5:7443, got {entry}"),
                    params={"entry": describe(entry)}
                )


def load_agent_config(path: str | None) -> AgentConfig:
    """agent.yaml at `path`, or every default when there is none to read."""
    if path is None:
        return AgentConfig()
    return load_file(AgentConfig, path)
