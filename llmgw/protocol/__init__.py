"""The agent protocol: messages (messages.py) and their JSON form on the agent's WebSocket.

    encode(StartShard(...)) -> b'{"type":"start_shard","body":{...}}'
    decode(raw) -> StartShard(...)

decode raises ProtocolError naming the field that is wrong; a message type
it does not know is an error too (the sender is newer: it must not assume
it was understood). Nothing outside this package builds the JSON by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmgw.lazyface import lazy_face
from llmgw.protocol.codec import ProtocolError, from_dict, seal, to_dict, unseal
from llmgw.protocol.messages import (  # the messages are this package's interface (__all__)
    GPU,
    MESSAGES,
    PROTOCOL_VERSION,
    SHARD_STATES,
    TYPE_OF,
    CachedBlocks,
    EngineProfile,
    Error,
    FabricResult,
    FabricTest,
    FetchProgress,
    GPUSensor,
    Heartbeat,
    Host,
    LogLine,
    LogsRequest,
    MIGDevice,
    NodeLogs,
    NotLeader,
    Provision,
    Register,
    RemoveWeights,
    ShardLoad,
    ShardState,
    ShardStatus,
    StartShard,
    StopShard,
    Storage,
    Upgrade,
    Welcome,
)

if TYPE_CHECKING:
    from llmgw.protocol.link import Link, LinkLost

MAX_MESSAGE_BYTES = 4 << 20  # a Register of a node with many GPUs and disks is a few KB; logs are bounded


def encode(message: Any) -> bytes:
    return seal(message, TYPE_OF, "a protocol message")


def decode(raw: bytes | str) -> Any:
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a message of {len(raw)} bytes is more than the {MAX_MESSAGE_BYTES} taken")
    return unseal(raw, MESSAGES)


__all__ = [
    "encode", "decode", "ProtocolError", "from_dict", "to_dict", "MAX_MESSAGE_BYTES", "PROTOCOL_VERSION",
    "SHARD_STATES", "ShardState",
    "Register", "Heartbeat", "ShardStatus", "NodeLogs", "CachedBlocks", "FabricTest", "FabricResult", "Welcome",
    "NotLeader", "Provision",
    "StartShard", "StopShard", "RemoveWeights", "LogsRequest", "Upgrade", "Error",
    "Host", "GPU", "MIGDevice", "Storage", "GPUSensor", "ShardLoad", "FetchProgress", "EngineProfile", "LogLine",
    "Link", "LinkLost",
]


# Names that would load more than the rest of the face, imported from their module when first asked for
# (llmgw/lazyface.py): the WebSocket link (aiohttp) is wanted by the agent and the control plane, not by a message.
__getattr__ = lazy_face(__name__, {
    "link": ("Link", "LinkLost"),
})
