"""Two `llmgw server` processes on one PostgreSQL: one leads, the other stands by and takes over."""

from __future__ import annotations

import signal

import openai
import pytest

from tests.support.waiting import wait_for


@pytest.fixture
def pair(servers, postgres_cluster):
    url = postgres_cluster.create_database()
    a, b = servers("cp-a", store=url), servers("cp-b", store=url)
    assert a.init().returncode == 0
    a.start()
    wait_for(a.leads, timeout=10)
    b.start()
    return a, b


def test_two_control_planes_on_one_store_have_exactly_one_leader(pair):
    a, b = pair
    assert a.leads() and not b.leads()
    status, body = b.get("/leader")
    assert status == 503
    assert body["leader_address"] == a.client_url
    assert a.ctl_json("ctl", "status")["role"] == "leader"
    standby = b.ctl_json("ctl", "status")
    assert standby["role"] == "standby" and standby["leader"]["address"] == a.client_url


def test_when_the_leader_is_killed_the_standby_leads_within_15_seconds(pair):
    a, b = pair
    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    led, took = wait_for(b.leads, timeout=20, interval=0.2)
    assert led, b.output()
    assert took < 15
    assert b.ctl_json("ctl", "status")["leader"]["epoch"] == 2


def test_a_leader_stopped_with_sigterm_hands_over_at_once(pair):
    a, b = pair
    assert a.stop() == 0
    led, took = wait_for(b.leads, timeout=10, interval=0.1)
    assert led
    assert took < 5  # the lease was given up, not left to lapse


def test_settings_changed_on_one_control_plane_are_in_force_on_the_other_within_5_seconds(pair):
    a, b = pair
    b.ctl_json("ctl", "config", "set", "models", "[{name: qwen}]")
    made = a.ctl_json("keys", "create", "k", "--project", "Demo/dev/app")
    sdk = openai.OpenAI(api_key=made["key"], base_url=a.client_url + "/v1", max_retries=0)
    listed, took = wait_for(lambda: [m.id for m in sdk.models.list()] == ["qwen"], timeout=10, interval=0.1)
    assert listed
    assert took < 5


def test_a_key_revoked_on_one_control_plane_is_refused_on_the_other_within_the_cache_ttl(pair):
    a, b = pair
    a.ctl_json("ctl", "config", "set", "auth.cache_ttl", "2s")
    made = a.ctl_json("keys", "create", "k", "--project", "Demo/dev/app")
    on_b = openai.OpenAI(api_key=made["key"], base_url=b.client_url + "/v1", max_retries=0)
    wait_for(lambda: b.ctl_json("ctl", "config", "get", "auth.cache_ttl")["value"] == "2s", timeout=10)
    on_b.models.list()
    a.ctl_json("keys", "revoke", made["id"])

    def refused():
        try:
            on_b.models.list()
            return False
        except openai.AuthenticationError:
            return True

    ok, took = wait_for(refused, timeout=10, interval=0.1)
    assert ok
    assert took < 2 + 5 + 1  # the cache TTL, plus the settings' own reach, plus a poll
