"""`server init`'s first settings: server.yaml's, with the baseline guardrails unless the file has its own."""

from __future__ import annotations

import pytest

from llmgw.config.guard import GuardSettings, Policy, Rules
from llmgw.config.loader import from_dict, to_dict
from llmgw.config.server import ClusterSettings, ServerConfig
from llmgw.control.settings import seed_settings
from llmgw.notify import NotifyError
from llmgw.onboard.first_run import FirstWebhook, first_settings, init_server
from llmgw.store import open_store


def test_without_guard_policies_the_baseline_applies_to_every_request():
    settings, outcome = first_settings(ServerConfig())
    assert outcome == "installed"
    assert settings.guard.default == ["baseline"]
    baseline = settings.guard.policies["baseline"]
    assert (baseline.input.secrets, baseline.output.secrets) == ("block", "block")
    assert (baseline.input.cards, baseline.output.cards, baseline.input.injection) == ("redact", "redact", "flag")
    # init places no judge model, and one named but not served would refuse everything
    assert baseline.judge is None and baseline.fail == "open"


def test_a_server_yaml_with_policies_of_its_own_keeps_them_and_gets_no_baseline():
    own = GuardSettings(default=["privacy"], policies={"privacy": Policy(input=Rules(pii={"email": "redact"}))})
    settings, outcome = first_settings(ServerConfig(guard=own), {"default": ["privacy"], "policies": {}})
    assert outcome == "kept"
    assert settings.guard == own


def test_a_guard_default_the_file_sets_is_kept_with_the_baseline_defined_beside_it():
    settings, outcome = first_settings(ServerConfig(), {"default": []})
    assert outcome == "defined"
    assert settings.guard.default == [] and "baseline" in settings.guard.policies


def test_the_rest_of_server_yaml_is_what_init_writes():
    cfg = from_dict(ServerConfig, {"auth": {"cache_ttl": "3s"}, "models": [{"name": "m", "endpoints": ["http://e/v1"]}]})
    settings, _ = first_settings(cfg)
    assert to_dict(settings.auth) == to_dict(cfg.auth)
    assert [m.name for m in settings.models] == ["m"]


async def test_init_leaves_settings_a_control_plane_already_wrote_as_they_are(tmp_path):
    cfg = ServerConfig(data_dir=str(tmp_path), store=f"sqlite:{tmp_path / 'llmgw.db'}")
    store = await open_store(cfg.store)
    try:
        assert await seed_settings(store, ClusterSettings(), "server.yaml", "system")
    finally:
        await store.close()
    result = await init_server(cfg, admin_email="a@example.com", project="A/b/c")
    assert result["guard"] == {"baseline": "store", "default": [], "enabled": True}
    store = await open_store(cfg.store)
    try:
        assert (await store.get_settings()).doc["guard"]["policies"] == {}
    finally:
        await store.close()


async def test_init_writes_the_baseline_into_a_new_store_recorded_as_its_doing(tmp_path):
    cfg = ServerConfig(data_dir=str(tmp_path), store=f"sqlite:{tmp_path / 'llmgw.db'}")
    result = await init_server(cfg, admin_email="a@example.com", project="A/b/c")
    assert result["guard"]["baseline"] == "installed"
    store = await open_store(cfg.store)
    try:
        assert (await store.get_settings()).doc["guard"]["default"] == ["baseline"]
        seeded = [e for e in await store.list_audit(limit=10) if e.action == "config.seed"]
        assert [(e.actor, e.via) for e in seeded] == [("server init", "cli")]
    finally:
        await store.close()


async def test_a_webhook_given_to_init_is_added_with_the_rest_and_in_the_audit_log(tmp_path):
    cfg = ServerConfig(data_dir=str(tmp_path), store=f"sqlite:{tmp_path / 'llmgw.db'}")
    result = await init_server(cfg, admin_email="a@example.com", project="A/b/c",
                               webhook=FirstWebhook("https://hooks.example.com/llmgw", "slack"))
    assert result["webhook"]["url"] == "https://hooks.example.com/llmgw"
    store = await open_store(cfg.store)
    try:
        [hook] = await store.list_webhooks()
        assert (hook.url, hook.format, hook.events, hook.enabled) == ("https://hooks.example.com/llmgw", "slack",
                                                                      ("*",), True)
        added = [e for e in await store.list_audit(limit=20) if e.action == "webhook.add"]
        assert [(e.actor, e.target) for e in added] == [("server init", f"webhook:{hook.id}")]
    finally:
        await store.close()


async def test_a_webhook_init_may_not_send_to_is_refused_before_anything_is_written(tmp_path):
    cfg = ServerConfig(data_dir=str(tmp_path), store=f"sqlite:{tmp_path / 'llmgw.db'}")
    with pytest.raises(NotifyError) as refused:
        await init_server(cfg, admin_email="a@example.com", project="A/b/c",
                          webhook=FirstWebhook("http://127.0.0.1:9000/hook"))
    assert "127.0.0.1 is this machine (loopback)" in str(refused.value)
    store = await open_store(cfg.store)
    try:
        assert await store.count_people() == 0 and await store.list_webhooks() == []
    finally:
        await store.close()
    done = await init_server(cfg, admin_email="a@example.com", project="A/b/c",
                             webhook=FirstWebhook("http://127.0.0.1:9000/hook", allow_private=True))
    assert done["webhook"]["allow_private"] is True
