"""The engines' API key: the same on every control plane holding the master key, and never shown."""

from __future__ import annotations

from llmgw.protocol import EngineProfile, StartShard
from llmgw.trust.masterkey import MasterKey


def test_every_control_plane_with_the_master_key_derives_the_same_engine_key_and_others_cannot():
    raw = bytes(range(32))
    one, two = MasterKey(raw), MasterKey(raw)
    assert one.derive("engine-api-key") == two.derive("engine-api-key")
    assert one.derive("engine-api-key") != one.derive("something-else")
    assert MasterKey(bytes(32)).derive("engine-api-key") != one.derive("engine-api-key")
    assert raw not in one.derive("engine-api-key")


def test_a_start_shard_never_shows_its_key_when_printed_or_logged():
    message = StartShard("s1", EngineProfile("llamacpp", "qwen"), api_key="k-very-secret")
    assert "k-very-secret" not in repr(message) and "k-very-secret" not in str(message)
