"""validated_change: the one way the admin API and the portal change the cluster's settings, checked alike."""

from __future__ import annotations

import pytest

from llmgw.account import Actor
from llmgw.config import ClusterSettings
from llmgw.config.server import ServerConfig
from llmgw.control.settings import ClusterSettingsWatcher, SettingsError, seed_settings, validated_change

ADA = Actor("ada@example.com", "portal")


@pytest.fixture
def cfg(tmp_path) -> ServerConfig:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("master-key", "admin-token"):
        (data / name).write_text("c2VjcmV0LW9mLWxsbWd3LW5vdC1hLXByb3ZpZGVyLWtleQ==\n")
        (data / name).chmod(0o600)
    return ServerConfig(data_dir=str(data), store=f"sqlite:{data / 'llmgw.db'}")


@pytest.fixture
async def watcher(store) -> ClusterSettingsWatcher:
    await seed_settings(store, ClusterSettings(), "server.yaml", "system")
    w = ClusterSettingsWatcher(store)
    await w.refresh()
    return w


async def test_a_valid_change_is_written_in_force_and_audited_as_who_made_it(store, watcher, cfg):
    version, doc = await validated_change(watcher, cfg, ADA, set_={"auth.cache_ttl": "7s"}, expected_version=1)

    assert version == 2 and doc["auth"]["cache_ttl"] == "7s"
    assert str(watcher.current.auth.cache_ttl) == "7s"
    entry = (await store.list_audit(limit=1))[0]
    assert (entry.actor, entry.via, entry.action) == ("ada@example.com", "portal", "config.set")
    assert entry.after == {"auth.cache_ttl": "7s"}


async def test_a_value_a_rule_refuses_is_a_sentence_naming_the_key_with_its_template_apart(watcher, cfg):
    with pytest.raises(SettingsError) as refused:
        await validated_change(watcher, cfg, ADA, set_={"auth.session_idle": "0s"})

    assert str(refused.value) == "auth.session_idle: must be longer than 0, got 0s"
    assert refused.value.key == "auth.session_idle"
    assert refused.value.template == "must be longer than 0, got {value}"
    assert refused.value.status == 400
    assert watcher.version == 1


async def test_a_form_read_before_someone_else_saved_is_refused_with_both_versions(watcher, cfg):
    await validated_change(watcher, cfg, ADA, set_={"auth.cache_ttl": "7s"}, expected_version=1)

    with pytest.raises(SettingsError) as refused:
        await validated_change(watcher, cfg, ADA, set_={"auth.cache_ttl": "9s"}, expected_version=1)

    assert refused.value.status == 409
    assert str(refused.value) == ("the cluster's settings changed since you read them (version 1, now 2); "
                                  "read them again")
    assert str(watcher.current.auth.cache_ttl) == "7s"


async def test_a_machine_key_is_refused_with_where_it_lives(watcher, cfg):
    with pytest.raises(SettingsError, match=r"listen.admin is this machine's own setting, kept in its server.yaml"):
        await validated_change(watcher, cfg, ADA, set_={"listen.admin": "0.0.0.0:9090"})


async def test_a_provider_key_file_that_is_this_machines_own_secret_is_refused(watcher, cfg):
    model = {"name": "gpt", "source": "external", "external": {
        "url": "https://api.example.com/v1", "api_key_file": f"{cfg.data_dir}/master-key"}}
    _, doc = await watcher.document()

    with pytest.raises(SettingsError, match=r"models\[0\]\.external\.api_key_file: .*llmgw's own secrets"):
        await validated_change(watcher, cfg, ADA, whole={**doc, "models": [model]})
    assert watcher.version == 1


async def test_a_guardrail_naming_a_detector_no_plugin_gives_is_refused(watcher, cfg):
    _, doc = await watcher.document()
    guard = {**doc["guard"], "policies": {"strict": {"input": {"detectors": {"no_such_kind": "block"}}}}}

    with pytest.raises(SettingsError) as refused:
        await validated_change(watcher, cfg, ADA, whole={**doc, "guard": guard})

    assert "no installed plugin gives a detector of kind 'no_such_kind'" in str(refused.value)
    assert refused.value.key == "guard.policies.strict.input.detectors.no_such_kind"
