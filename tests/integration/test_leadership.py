"""Two `llmgw server` processes on one PostgreSQL: one leads, the other stands by and takes over."""

from __future__ import annotations

import signal

import openai
import pytest

from tests.support.waiting import wait_for, wait_until


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


def test_when_the_leader_is_killed_the_standby_leads_once_its_lease_lapses(pair):
    a, b = pair
    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    # How soon (the lease's 10 s TTL) is the lease's own tests' and the HA bench's to measure, not a bound here.
    wait_until(b.leads, timeout=60, what=f"the standby led after the leader was killed:\n{b.output()[-3000:]}",
               interval=0.2)
    assert b.ctl_json("ctl", "status")["leader"]["epoch"] == 2


def test_a_leader_stopped_with_sigterm_hands_over_at_once(pair):
    a, b = pair
    assert a.stop() == 0
    assert "gave up the lease so a standby can lead at once" in a.output()  # not left to lapse
    wait_until(b.leads, timeout=60, what="the standby led after the leader gave up its lease", interval=0.1)
    assert b.ctl_json("ctl", "status")["leader"]["epoch"] == 2


def test_settings_changed_on_one_control_plane_are_in_force_on_the_other(pair):
    a, b = pair
    b.ctl_json("ctl", "config", "set", "models", "[{name: qwen}]")
    made = a.ctl_json("keys", "create", "k", "--project", "Demo/dev/app", "--create")
    sdk = openai.OpenAI(api_key=made["key"], base_url=a.client_url + "/v1", max_retries=0)
    wait_until(lambda: [m.id for m in sdk.models.list()] == ["qwen"], timeout=60, interval=0.1,
               what="the model set on the standby was listed by the leader")


def test_a_key_revoked_on_one_control_plane_is_refused_on_the_other_once_its_cache_entry_expires(pair):
    a, b = pair
    a.ctl_json("ctl", "config", "set", "auth.cache_ttl", "2s")
    made = a.ctl_json("keys", "create", "k", "--project", "Demo/dev/app", "--create")
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

    wait_until(refused, timeout=60, interval=0.1, what="the key revoked on the leader was refused on the standby")
