"""`llmgw server`, `server init`, `ctl` and `keys` as a person uses them, against real processes."""

from __future__ import annotations

import json
import os
import stat

import openai
import pytest

from tests.support.servers import Server, llmgw
from tests.support.waiting import wait_for


def test_init_prints_an_administrator_and_a_key_once_and_never_again(servers):
    s = servers("cp1")
    first = s.init()
    assert first.returncode == 0, first.stderr
    assert "password" in first.stdout and "sk-llmgw-" in first.stdout
    assert stat.S_IMODE(os.stat(s.token_file).st_mode) == 0o600
    again = s.init()
    assert again.returncode == 0
    assert "already set up here (1 person);" in again.stdout
    assert "sk-llmgw-" not in again.stdout and "password" not in again.stdout


def test_init_with_a_webhook_says_where_events_go_and_a_second_run_says_it_was_not_added(servers):
    s = servers("cp1")
    first = s.init("--webhook", "https://hooks.example.com/llmgw", "--webhook-format", "slack")
    assert first.returncode == 0, first.stderr
    assert "notifications   every event to https://hooks.example.com/llmgw (slack;" in first.stdout

    again = s.init("--webhook", "https://hooks.example.com/other")
    assert again.returncode == 0
    assert ("The webhook was not added: this store was set up before. Add it with:\n"
            "  llmgw ctl webhooks add https://hooks.example.com/other") in again.stdout
    refused = servers("cp2").init("--webhook", "http://169.254.169.254/latest")
    assert refused.returncode == 1 and "169.254.169.254 is a cloud metadata address" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_server_prints_a_client_api_address_a_client_on_this_machine_can_use(shared_server):
    # Printed once start-up is done, which can be a moment after /health first answers.
    said, _ = wait_for(lambda: [line for line in shared_server.output().splitlines() if " is up: " in line],
                       timeout=10, interval=0.1)
    assert said == [f"llmgw server cp1 is up: client API {shared_server.client_url}/v1, "
                    f"admin API {shared_server.admin}"]


def test_ctl_status_shows_one_leading_control_plane_on_sqlite(shared_server):
    status = shared_server.ctl_json("ctl", "status")
    assert status["role"] == "leader"
    assert status["leader"]["holder"] == status["holder"]
    assert status["store"]["kind"] == "sqlite" and status["store"]["up"]


def test_a_created_key_works_with_the_openai_sdk_and_is_shown_once(shared_server):
    made = shared_server.ctl_json("keys", "create", "demo", "--project", "Demo/dev/app", "--create")
    assert made["key"].startswith("sk-llmgw-") and made["project"] == "Demo/dev/app"
    sdk = openai.OpenAI(api_key=made["key"], base_url=shared_server.client_url + "/v1", max_retries=0)
    assert list(sdk.models.list()) == []
    listed = shared_server.ctl_json("keys", "list")
    assert made["id"] in {k["id"] for k in listed}
    assert made["key"] not in json.dumps(listed)


def test_a_revoked_key_is_refused_by_the_first_request_after_revoking(shared_server):
    made = shared_server.ctl_json("keys", "create", "doomed", "--project", "Demo/dev/app", "--create")
    sdk = openai.OpenAI(api_key=made["key"], base_url=shared_server.client_url + "/v1", max_retries=0)
    sdk.models.list()  # now cached on the server
    assert shared_server.ctl("keys", "revoke", made["id"]).returncode == 0
    # The admin API drops the key from this server's cache before it answers: no wait, no second try.
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk.models.list()
    assert refused.value.body["message"] == "this API key was revoked"


def test_a_key_that_is_not_an_llmgw_key_is_refused_with_a_sentence(shared_server):
    status, body = shared_server.get("/v1/models", {"Authorization": "Bearer sk-proj-123"})
    assert status == 401
    assert body["error"]["message"] == ("that is not an llmgw API key: it starts sk-proj-, another service's key "
                                        "perhaps; llmgw keys start sk-llmgw-")
    status, body = shared_server.get("/v1/models")
    assert status == 401 and body["error"]["code"] == "missing_api_key"


def test_a_second_server_on_the_same_ports_exits_with_one_sentence(shared_server, tmp_path):
    twin = Server(tmp_path, "twin")
    twin.ports = dict(shared_server.ports)
    done = llmgw("server", *twin.args(), timeout=90)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "port" in done.stderr and "taken by another process" in done.stderr
    assert shared_server.leads()


def test_server_refuses_a_word_it_does_not_know():
    done = llmgw("server", "strat")
    assert done.returncode == 2
    assert "invalid choice: 'strat'" in done.stderr


def test_a_typo_in_server_yaml_is_refused_naming_the_key(servers, tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("router:\n  cahce:\n    max_bytes: 1GB\n")
    s = servers("cp1", config=str(config))
    done = llmgw("server", *s.args(), timeout=90)
    assert done.returncode == 1
    assert done.stderr.startswith(f"llmgw: {config}: router.cahce: unknown key")
    assert "router.cache" in done.stderr
    assert not (s.data_dir / "llmgw.db").exists()


def test_a_bad_size_is_refused_with_what_was_expected(servers, tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("router:\n  cache:\n    max_bytes: lots\n")
    done = llmgw("server", *servers("cp1", config=str(config)).args(), timeout=90)
    assert done.returncode == 1
    assert 'router.cache.max_bytes: expected a size like 256MB, got "lots"' in done.stderr


def test_an_unreachable_store_is_one_sentence_and_no_password(servers):
    from tests.support.pgcluster import free_port

    s = servers("cp1", store=f"postgresql://llmgw:hunter2@127.0.0.1:{free_port()}/llmgw")
    done = llmgw("server", *s.args(), timeout=90)
    assert done.returncode == 1
    assert "refused the connection; is PostgreSQL running there?" in done.stderr
    assert "hunter2" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_token_file_readable_by_others_is_refused(servers):
    s = servers("cp1")
    assert s.init().returncode == 0
    os.chmod(s.token_file, 0o644)
    done = llmgw("server", *s.args(), timeout=90)
    assert done.returncode == 1
    assert "can be read by others (mode 0644)" in done.stderr


def test_ctl_without_a_running_server_says_so(servers):
    s = servers("cp1")
    assert s.init().returncode == 0
    done = s.ctl("ctl", "status")
    assert done.returncode == 1
    assert done.stderr.startswith(f"llmgw: no llmgw server answers at {s.admin}; is it running?")


def test_ctl_with_an_unreadable_token_says_so(shared_server, tmp_path):
    missing = tmp_path / "nowhere" / "admin-token"
    done = llmgw("ctl", "status", "--admin", shared_server.admin, "--token-file", str(missing))
    assert done.returncode == 1
    assert f"there is no admin token at {missing}" in done.stderr


def test_every_admin_route_refuses_a_caller_without_the_token(shared_server):
    import urllib.error
    import urllib.request

    for method, path in [("GET", "/api/v1/status"), ("GET", "/api/v1/config"), ("POST", "/api/v1/config"),
                         ("GET", "/api/v1/audit"), ("POST", "/api/v1/keys"), ("GET", "/api/v1/keys"),
                         ("GET", "/api/v1/keys/key_x"), ("POST", "/api/v1/keys/key_x/revoke"),
                         ("GET", "/api/v1/limits"), ("PUT", "/api/v1/limits"), ("GET", "/api/v1/nothing")]:
        request = urllib.request.Request(f"http://{shared_server.admin}{path}", method=method,
                                         headers={"Authorization": "Bearer wrong-token-" + "x" * 40})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, data=b"{}" if method != "GET" else None, timeout=5)
        assert refused.value.code == 401, path


def test_malformed_json_to_the_admin_api_is_a_400_with_a_sentence(shared_server):
    import urllib.error
    import urllib.request

    token = open(shared_server.token_file).read().strip()
    request = urllib.request.Request(f"http://{shared_server.admin}/api/v1/keys", method="POST", data=b"{nope",
                                     headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"]["message"].startswith("the body is not JSON")


def test_keys_limits_change_only_what_they_are_given_unless_replaced(shared_server):
    made = shared_server.ctl_json("keys", "create", "lim", "--project", "Demo/dev/app", "--create")
    shared_server.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", "60", "--budget", "5")
    after = shared_server.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--tpm", "1000")
    assert after["limits"]["rpm"] == 60 and after["limits"]["tpm"] == 1000
    assert after["limits"]["budget"] == "5.00" and after["limits"]["period"] == "month"
    replaced = shared_server.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--tpm", "10",
                               "--replace")
    assert replaced["limits"]["rpm"] is None and replaced["limits"]["tpm"] == 10
    assert replaced["limits"]["budget"] is None


def test_a_level_cannot_widen_what_the_level_above_allows(shared_server):
    made = shared_server.ctl_json("keys", "create", "narrow", "--project", "Acme/ml/chat", "--create")
    shared_server.ctl_json("keys", "limits", "--scope", "team", "--id", "Acme/ml", "--rpm", "100", "--models", "a,b")
    done = shared_server.ctl("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", "500")
    assert done.returncode == 1
    assert "above its team's 100" in done.stderr
    done = shared_server.ctl("keys", "limits", "--scope", "project", "--id", "Acme/ml/chat", "--models", "c")
    assert done.returncode == 1 and "not allowed by its team" in done.stderr


def test_a_model_the_key_may_not_use_is_not_listed(server, tmp_path):
    server.ctl_json("ctl", "config", "set", "models",
                    '[{name: qwen, context_length: 32768}, {name: llama, context_length: 8192}]')
    made = server.ctl_json("keys", "create", "m", "--project", "Acme/ml/chat", "--create")
    server.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--models", "qwen")
    sdk = openai.OpenAI(api_key=made["key"], base_url=server.client_url + "/v1", max_retries=0)
    assert [m.id for m in sdk.models.list()] == ["qwen"]


def test_max_key_ttl_caps_a_new_key_and_refuses_a_longer_ttl(server):
    server.ctl_json("ctl", "config", "set", "auth.max_key_ttl", "30d")
    made = server.ctl_json("keys", "create", "short", "--project", "Demo/dev/app", "--create")
    assert made["expires_at"] == pytest.approx(made["created_at"] + 30 * 86400, abs=5)
    done = server.ctl("keys", "create", "long", "--project", "Demo/dev/app", "--create", "--ttl", "90d")
    assert done.returncode == 1
    assert "longer than the cluster allows (auth.max_key_ttl 30d)" in done.stderr


def test_the_audit_log_says_who_changed_what_and_never_holds_a_key(server):
    made = server.ctl_json("keys", "create", "audited", "--project", "Demo/dev/app", "--create")
    server.ctl_json("keys", "revoke", made["id"])
    server.ctl_json("ctl", "config", "set", "auth.cache_ttl", "3s")
    entries = server.ctl_json("ctl", "audit")
    actions = [(e["action"], e["target"]) for e in entries]
    assert ("key.revoke", f"key:{made['id']}") in actions and ("key.create", f"key:{made['id']}") in actions
    config = next(e for e in entries if e["action"] == "config.set")
    assert config["before"] == {"auth.cache_ttl": "5s"} and config["after"] == {"auth.cache_ttl": "3s"}
    assert config["via"] == "cli"
    dump = json.dumps(entries)
    assert made["key"] not in dump and server.first_key not in dump
    assert open(server.token_file).read().strip() not in dump


def test_a_machine_key_set_as_a_cluster_setting_is_refused_with_where_it_lives(server):
    done = server.ctl("ctl", "config", "set", "listen.admin", "0.0.0.0:9090")
    assert done.returncode == 1
    assert "this machine's own setting, kept in its server.yaml" in done.stderr


def test_sigterm_gives_the_lease_up_and_exits_cleanly(server):
    assert server.leads()
    assert server.stop() == 0
    assert "gave up the lease" in server.output()
