"""The agent protocol's messages survive the wire, and a bad one is refused naming what is wrong."""

from __future__ import annotations

import pytest

from llmgw.protocol import (
    GPU,
    EngineProfile,
    FetchProgress,
    Heartbeat,
    Host,
    MIGDevice,
    ProtocolError,
    Register,
    ShardStatus,
    StartShard,
    Storage,
    decode,
    encode,
)


def test_every_message_comes_back_as_it_was_sent():
    register = Register("node-1", "gpu-a", "0.9.0", host=Host("gpu-a", cpu_cores=32, memory_mb=257_000),
                        gpus=[GPU(0, "GPU-1", "H100", 81_559, "9.0", 5, 5, 16, 16, [1]),
                              GPU(1001, mig=MIGDevice(1, "GPU-2", 1, 0, "1g.10gb"))],
                        storage=[Storage("/var/lib/llmgw/weights", "/dev/nvme0n1", 2 << 40, 1 << 40)],
                        engines={"llamacpp": "b6000"}, labels={"llmgw.role": "judge"},
                        shards=[ShardStatus("s1", "starting", "qwen", fetch=FetchProgress("hf:a/b/c.gguf", 10, 0))])
    start = StartShard("s1", EngineProfile("llamacpp", "qwen", "hf:a/b/c.gguf", sha256="ab" * 32,
                                           args=["--ctx-size", "8192"], gpus=[0], slots=4), port=8001)
    for message in (register, start, Heartbeat(1700000000.5, cpu_percent=12.5)):
        assert decode(encode(message)) == message


def test_a_field_of_the_wrong_type_is_refused_naming_it():
    with pytest.raises(ProtocolError, match=r"register.gpus\[0\].memory_mb: expected a whole number"):
        decode(b'{"type": "register", "body": {"node_id": "n", "name": "a", "version": "1", '
               b'"gpus": [{"index": 0, "memory_mb": "lots"}]}}')
    with pytest.raises(ProtocolError, match="shard_status.state: expected one of"):
        decode(b'{"type": "shard_status", "body": {"shard_id": "s", "state": "sleeping"}}')
    with pytest.raises(ProtocolError, match="start_shard.profile: missing"):
        decode(b'{"type": "start_shard", "body": {"shard_id": "s"}}')


def test_an_unknown_field_is_ignored_but_an_unknown_message_is_refused():
    assert decode(b'{"type": "heartbeat", "body": {"at": 1, "from_a_newer_agent": true}}') == Heartbeat(1.0)
    with pytest.raises(ProtocolError, match="unknown message type 'teleport'"):
        decode(b'{"type": "teleport", "body": {}}')
    with pytest.raises(ProtocolError, match="not JSON"):
        decode(b"{")
