import pytest

from llmgw.config import (
    MACHINE_KEYS,
    ClusterSettings,
    ConfigError,
    Duration,
    ServerConfig,
    cluster_keys_in,
    cluster_part,
    from_dict,
    load_server_config,
)


def refused(data) -> str:
    with pytest.raises(ConfigError) as err:
        from_dict(ServerConfig, data)
    return str(err.value)


def test_the_defaults_of_an_empty_file_equal_server_config(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text("")
    assert load_server_config(str(path)) == ServerConfig()
    assert load_server_config(None) == ServerConfig()


def test_the_documented_defaults_hold():
    cfg = ServerConfig()
    assert cfg.control.lease_ttl == 10
    assert cfg.control.settings_poll == 2
    assert cfg.auth.cache_ttl == 5
    assert cfg.auth.max_key_ttl == 0
    assert str(cfg.router.cache.max_bytes) == "256MB"
    assert str(cfg.listen.admin) == "127.0.0.1:9090"
    assert cfg.admin_token_path == "/var/lib/llmgw/admin-token"


def test_a_non_loopback_admin_listener_is_refused_unless_allowed():
    message = refused({"listen": {"admin": ":9090"}})
    assert message.startswith("listen.admin: :9090 can be reached from other machines;")
    assert "admin_allow_remote: true" in message
    cfg = from_dict(ServerConfig, {"listen": {"admin": "10.0.0.5:9090"}, "admin_allow_remote": True})
    assert cfg.listen.admin.host == "10.0.0.5"


def test_the_admin_listener_may_be_on_ipv6_loopback():
    assert from_dict(ServerConfig, {"listen": {"admin": "[::1]:9090"}}).listen.admin.is_loopback


def test_the_metrics_listener_may_be_turned_off_and_the_others_may_not():
    assert from_dict(ServerConfig, {"listen": {"metrics": "off"}}).listen.metrics.off
    assert refused({"listen": {"client": "off"}}).startswith('listen.client: expected an address like :8080')


def test_two_listeners_on_one_port_are_refused():
    message = refused({"listen": {"agent": ":8080"}})
    assert message == "listen.agent: :8080 takes the same port as listen.client (:8080); each listener needs its own"


def test_listeners_on_port_zero_may_share_it_for_tests():
    cfg = from_dict(ServerConfig, {"listen": {"client": "127.0.0.1:0", "agent": "127.0.0.1:0",
                                              "admin": "127.0.0.1:0", "metrics": "127.0.0.1:0"}})
    assert cfg.listen.client.port == 0


def test_a_store_that_is_neither_sqlite_nor_postgresql_is_refused_with_both_forms():
    message = refused({"store": "mysql://db/llmgw"})
    assert message == ('store: expected sqlite:/path/to/llmgw.db or postgresql://user@host/llmgw, '
                       'got "mysql://db/llmgw"')
    assert from_dict(ServerConfig, {"store": "postgres://10.0.0.6/llmgw"}).store.startswith("postgres://")


def test_a_settings_poll_beyond_five_seconds_is_refused():
    assert refused({"control": {"settings_poll": "10s"}}).startswith(
        "control.settings_poll: must be more than 0 and at most 5s, got 10s"
    )
    assert refused({"control": {"settings_poll": 0}}).startswith("control.settings_poll: must be more than 0")


def test_a_lease_ttl_of_zero_takes_the_default():
    assert from_dict(ServerConfig, {"control": {"lease_ttl": 0}}).control.lease_ttl == Duration("10s")


def test_models_need_a_name_each_of_their_own():
    assert refused({"models": [{"name": ""}]}).startswith("models[0].name: must not be empty")
    message = refused({"models": [{"name": "a"}, {"name": "b"}, {"name": "a"}]})
    assert message == "models[2].name: a is already the name of models[0]; each model needs its own"


def test_a_models_endpoints_must_be_http_urls():
    message = refused({"models": [{"name": "a", "endpoints": ["http://10.0.0.7:8000/v1", "10.0.0.8:8000"]}]})
    assert message.startswith('models[0].endpoints[1]: expected an http:// or https:// URL')


def test_a_longest_answer_beyond_the_context_is_refused():
    message = refused({"models": [{"name": "a", "context_length": 4096, "max_output_tokens": 8192}]})
    assert message.startswith("models[0].max_output_tokens: 8192 is more than context_length (4096)")


def test_trusted_proxies_must_be_addresses_or_prefixes():
    assert from_dict(ServerConfig, {"router": {"trusted_proxies": ["10.0.0.0/8", "::1"]}}).router.trusted_proxies
    assert refused({"router": {"trusted_proxies": ["lb.example.com"]}}) == (
        'router.trusted_proxies[0]: expected an address or CIDR prefix like 10.0.0.0/8, got "lb.example.com"'
    )


def test_a_log_level_outside_the_choices_is_refused_with_them():
    assert refused({"log": {"level": "verbose"}}) == (
        'log.level: expected one of debug|info|warning|error, got "verbose"')


def test_the_cluster_part_carries_the_cluster_settings_only():
    cfg = from_dict(ServerConfig, {"name": "cp1", "auth": {"cache_ttl": "2s"}, "models": [{"name": "a"}]})
    part = cluster_part(cfg)
    assert type(part) is ClusterSettings
    assert part.auth.cache_ttl == 2
    assert part.models[0].name == "a"
    assert not hasattr(part, "listen")


def test_the_machine_keys_are_server_configs_own():
    assert MACHINE_KEYS == ("name", "store", "data_dir", "admin_token_file", "advertise", "listen",
                            "admin_allow_remote", "firewall_networks", "log", "workers")


def test_cluster_keys_in_a_file_are_found_so_they_can_be_pointed_out():
    assert cluster_keys_in({"name": "cp1", "router": {}, "auth": {"cache_ttl": "1s"}}) == ["auth", "router"]
    assert cluster_keys_in(None) == []


def test_a_store_with_several_hosts_must_ask_for_the_one_that_takes_writes():
    hosts = "postgresql://llmgw:pw@10.0.0.6:5432,10.0.0.7:5432/llmgw"
    assert refused({"store": hosts}) == (
        "store: with several hosts the address needs ?target_session_attrs=read-write, so that llmgw "
        "writes only to the primary; it has no target_session_attrs")
    assert "target_session_attrs=any" in refused({"store": hosts + "?target_session_attrs=any"})
    patroni = hosts + "?target_session_attrs=read-write"
    assert from_dict(ServerConfig, {"store": patroni}).store == patroni
