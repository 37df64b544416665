"""The messages between an agent and the control plane (the original's agent.proto), as dataclasses.

One WebSocket per agent to the leader carries them as JSON text frames,
each `{"type": NAME, "body": {...}}` (llmgw.protocol.encode/decode). Sizes
are in MB and bytes as named; times are Unix seconds; a 0 or "" is
"not known", never a guess.

Agent → control plane: Register (first, once per connection), Heartbeat
(every few seconds), ShardStatus (whenever a shard's state or download
moves), NodeLogs (an answer to LogsRequest), CachedBlocks (what an engine stored
in and evicted from its prefix cache, to a leader whose Welcome asked for them).
Control plane → agent: Welcome (the answer to Register), NotLeader (a
standby's refusal, naming the leader), Provision, StartShard, StopShard,
RemoveWeights, LogsRequest, Upgrade (an agent that cannot answers Error
about "upgrade"; one that can restarts into the new program).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ShardState = Literal["starting", "ready", "draining", "stopped", "failed"]
SHARD_STATES: tuple[str, ...] = ("starting", "ready", "draining", "stopped", "failed")
PROTOCOL_VERSION = 1


# --- what a node has -------------------------------------------------------------------------


@dataclass
class Host:
    hostname: str
    os: str = ""  # "Debian GNU/Linux 12 (bookworm)"
    kernel: str = ""
    arch: str = ""  # x86_64, aarch64
    cpu_model: str = ""
    cpu_cores: int = 0  # physical
    cpu_threads: int = 0  # logical
    memory_mb: int = 0
    nvidia_driver: str = ""
    cuda_version: str = ""
    mem_bandwidth_gbs: float = 0.0
    """How fast memory reads, GB/s, measured in the background after start: what decides a model's speed on CPUs. 0:
    not yet."""
    gpu_note: str = ""
    """Why a node with an NVIDIA driver shows no GPUs (the driver did not answer, NVML is missing); "" otherwise."""


@dataclass
class MIGDevice:
    """Which card a MIG instance is carved from, and how."""

    parent_index: int
    parent_uuid: str = ""
    gpu_instance: int = 0
    compute_instance: int = 0
    profile: str = ""  # "1g.10gb"


@dataclass
class GPU:
    index: int
    uuid: str = ""
    name: str = ""
    memory_mb: int = 0
    compute_capability: str = ""  # "8.9"
    # How the card is linked to its host: the generation and lanes in use,
    # against the card's own most. 0: the driver did not say.
    pcie_gen: int = 0
    pcie_gpu_gen: int = 0
    pcie_width: int = 0
    pcie_width_max: int = 0
    nvlink_peers: list[int] = field(default_factory=list)  # indexes of the cards it has NVLink to
    mig: MIGDevice | None = None
    source: str = ""  # "nvml" or "nvidia-smi"


@dataclass
class Storage:
    """One filesystem weights are kept on: free space belongs to the filesystem, not to a directory."""

    path: str
    device: str = ""
    total_bytes: int = 0
    free_bytes: int = 0


@dataclass
class Register:
    node_id: str
    """The node's id from its certificate; the control plane checks the two agree."""
    name: str
    version: str
    protocol: int = PROTOCOL_VERSION
    host: Host | None = None
    gpus: list[GPU] = field(default_factory=list)
    storage: list[Storage] = field(default_factory=list)
    engines: dict[str, str] = field(default_factory=dict)
    """Engines installed and their versions: {"llamacpp": "b6000", "sim": "0.3.0"}."""
    labels: dict[str, str] = field(default_factory=dict)
    shards: list[ShardStatus] = field(default_factory=list)
    """What it runs now (an agent that restarted and adopted its engines): the control plane keeps these rather than
    starting them again."""
    advertise: str = ""
    """The address the control planes reach this node at (its engines, its node exporter for /prometheus/targets);
    "" from an agent older than it."""


# --- how a node is doing ---------------------------------------------------------------------


@dataclass
class GPUSensor:
    index: int
    utilization_percent: float = 0.0
    memory_used_mb: int = 0
    temperature_c: float = 0.0
    power_w: float = 0.0
    power_limit_w: float = 0.0
    """The power limit the driver enforces now (an administrator may lower it): what power_w is read against.
    0: not known, as from an agent older than it."""
    xid_errors: int = 0
    # How much of the chip work uses (NVML's GPM, or a dcgm-exporter);
    # has_profile says they are present, -1 is not reported.
    has_profile: bool = False
    sm_active_percent: float = -1.0
    sm_occupancy_percent: float = -1.0
    tensor_active_percent: float = -1.0
    dram_active_percent: float = -1.0
    profile_source: str = ""  # "gpm" or "dcgm"


@dataclass
class ShardLoad:
    """One engine process group's use."""

    shard_id: str
    cpu_percent: float = 0.0
    rss_mb: int = 0
    gpu_memory_mb: int = 0


@dataclass
class Heartbeat:
    at: float
    cpu_percent: float = 0.0
    load1: float = 0.0
    memory_used_mb: int = 0
    memory_available_mb: int = 0
    gpus: list[GPUSensor] = field(default_factory=list)
    gpu_foreign_memory_mb: list[int] = field(default_factory=list)
    """Per card, memory held by processes that are not this agent's engines: not to be handed out."""
    mem_bandwidth_gbs: float = 0.0
    storage: list[Storage] = field(default_factory=list)
    shards: list[ShardLoad] = field(default_factory=list)


# --- shards ------------------------------------------------------------------------------------


@dataclass
class FetchProgress:
    source: str
    bytes_done: int = 0
    bytes_total: int = 0
    """0 when the server did not say how large: a byte count that rises beats an invented percentage."""
    phase: str = ""
    """"" while bytes arrive; "checking" while the sha256 of what arrived is computed."""


@dataclass
class EngineProfile:
    """How one shard is run: the engine and everything it is given."""

    engine: str  # llamacpp, vllm, sglang, trtllm, comfyui, strata, freetoken, sim
    model: str
    """The name the engine serves the model under (the catalog's name)."""
    source: str = ""
    """Where the weights come from: a path, http(s)://, hf:org/repo/file[@rev], a mirror URL; "" for an engine that
    needs none (sim)."""
    sha256: str = ""
    files: dict[str, str] = field(default_factory=dict)
    """A multi-file set: relative name → sha256; `source` is then the set's base URL."""
    allow_pickle: bool = False
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cpu_cores: int = 0
    memory_mb: int = 0
    gpus: list[int] = field(default_factory=list)
    context_length: int = 0
    slots: int = 0  # requests served at once (llama.cpp's --parallel)
    role: str = ""  # "judge", "embedding" or ""


@dataclass
class StartShard:
    """Start one shard. Idempotent by shard_id: the control plane retries, and a repeat starts nothing new."""

    shard_id: str
    profile: EngineProfile
    port: int = 0  # 0: the agent picks a free one
    startup_timeout_s: float = 600.0
    """Counted from the download's last progress, not from the start: a big download is not a failed start."""
    api_key: str = field(default="", repr=False)
    """The key the engine is started with, so only the control planes' routers can use it. Never logged."""
    traceparent: str = ""
    """The leader's `replica start` span (W3C traceparent), which the node's spans of this start go beneath; its
    flags carry the leader's sampling decision. Empty when the leader traces nothing: the node's own ratio decides."""
    mirrors: list[str] = field(default_factory=list)
    """The model mirrors to fetch an hf: source from, the one to try first first (https://10.0.0.9:8600): given,
    the node fetches from them and never from Hugging Face. Empty: from the node's own `weights` settings."""


@dataclass
class StopShard:
    shard_id: str
    grace_s: float = 30.0
    reason: str = ""


@dataclass
class ShardStatus:
    shard_id: str
    state: ShardState
    model: str = ""
    url: str = ""  # where the engine's OpenAI API answers: http://10.0.0.7:8001/v1
    pid: int = 0
    message: str = ""  # why it failed, or what it is waiting for
    fetch: FetchProgress | None = None
    exit_code: int | None = None
    since: float = 0.0  # when it entered this state
    # "weights" on a failure to fetch or check the weights, after the download's own tries: starting it again
    # on the same node fails the same way, so the control plane parks it rather than retrying without end.
    cause: str = ""
    # The length of the weights on the node, once they are here: what a model added without knowing its size
    # is sized from (llmgw.control.catalog.sizing). 0 while not known.
    weights_bytes: int = 0


@dataclass
class RemoveWeights:
    """Delete cached weights no model uses any more. The agent deletes only inside its cache directory."""

    sources: list[str]


@dataclass
class Provision:
    """The software a node should have: engines at versions."""

    engines: dict[str, str] = field(default_factory=dict)


@dataclass
class LogsRequest:
    request_id: str
    source: str = ""  # a shard id, or "" for the agent's own log
    lines: int = 200


@dataclass
class LogLine:
    at: float
    text: str
    stream: str = "stdout"


@dataclass
class NodeLogs:
    request_id: str
    source: str = ""
    lines: list[LogLine] = field(default_factory=list)
    error: str = ""


@dataclass
class CachedBlocks:
    """What a replica's engine stored in and evicted from its prefix cache since the last (docs/routing.md).

    The blocks are named by the chain hash llmgw computes over their token ids (llmgw/router/prefixindex.py),
    so no prompt's tokens leave the node. `cleared` comes first: the engine's cache emptied, or its events
    broke off and what the leader held of it is no longer known.
    """

    shard_id: str
    block_size: int = 0
    added: list[Any] = field(default_factory=list)  # ints, unchecked one by one (many thousands a second)
    removed: list[Any] = field(default_factory=list)
    cleared: bool = False


@dataclass
class FabricTest:
    """Measure the link to another node (`llmgw ctl fabric-test`, docs/large-models.md).

    `serve`: listen once, on the address the node advertises, for a connection that starts with `token`, and
    answer FabricResult with where. `probe`: connect to `address`, send `token`, time `pings` round trips of a
    byte and the receipt of `bytes` bytes, and answer FabricResult with the times. Plain TCP, as the traffic of
    a model split over nodes is: what is measured is the link, not TLS; the one-time token, sent to both over
    their mutual-TLS links, is what keeps anyone else off the listener.
    """

    request_id: str
    role: Literal["serve", "probe"]
    token: str = field(default="", repr=False)
    address: str = ""
    bytes: int = 0
    pings: int = 20


@dataclass
class FabricResult:
    request_id: str
    address: str = ""  # serve: where it listens
    rtt_ms: list[float] = field(default_factory=list)  # probe: each round trip
    bytes: int = 0  # probe: how many were received
    seconds: float = 0.0  # probe: from asking for them to the last one
    error: str = ""


@dataclass
class Upgrade:
    """Replace this node's program with `version` and restart into it (docs/upgrade.md).

    The agent fetches it from the control plane it is connected to over the
    same mutual TLS (GET /release/VERSION), checks it against `sha256`, keeps
    its own program as llmgw.previous, and exits for its service manager to
    start the new one. A watchdog of the old program puts llmgw.previous back
    when the new one has not connected within `confirm_within_s`."""

    version: str
    sha256: str
    confirm_within_s: float = 90.0
    wheels: dict[str, str] = field(default_factory=dict)
    """Engine wheels the control plane holds from an offline bundle (file name: sha256): fetched first
    (GET /release/wheels/NAME) into DATA/wheels, where the llama.cpp install takes them without a registry."""


# --- the connection --------------------------------------------------------------------------


@dataclass
class Welcome:
    node_id: str
    leader: str
    """The control plane that answered: the leader."""
    control_planes: list[str] = field(default_factory=list)
    """Every control plane's agent address, for the agent to dial the next when this one is lost."""
    heartbeat_s: float = 5.0
    cached_blocks: bool = False
    """The leader takes CachedBlocks; an older one would answer each with an Error."""


@dataclass
class NotLeader:
    """A standby's answer to Register: it does not take agents; dial the leader."""

    leader: str = ""  # "" while there is none
    control_planes: list[str] = field(default_factory=list)


@dataclass
class Error:
    """A message the other side could not act on, and why."""

    message: str
    about: str = ""  # the message type or shard id concerned


MESSAGES: dict[str, type] = {
    "register": Register,
    "heartbeat": Heartbeat,
    "shard_status": ShardStatus,
    "node_logs": NodeLogs,
    "cached_blocks": CachedBlocks,
    "fabric_test": FabricTest,
    "fabric_result": FabricResult,
    "welcome": Welcome,
    "not_leader": NotLeader,
    "provision": Provision,
    "start_shard": StartShard,
    "stop_shard": StopShard,
    "remove_weights": RemoveWeights,
    "logs_request": LogsRequest,
    "upgrade": Upgrade,
    "error": Error,
}
TYPE_OF: dict[type, str] = {cls: name for name, cls in MESSAGES.items()}
