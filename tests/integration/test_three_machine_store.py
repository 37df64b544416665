"""The three-machine store as llmgw writes it elects a leader, and `llmgw server` serves on the address it gives.

Real parts: three etcd members and two Patroni-run PostgreSQL 15 members
(Debian's packages) on loopback, each started from the files
llmgw.onboard.hastore wrote for its machine (tests/support/storemachines.py),
and a real `llmgw server` on the generated `store:` address.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from llmgw.onboard import patroni
from tests.support.storemachines import started
from tests.support.waiting import wait_until

# Three etcd members and PostgreSQL under Patroni, shared by the module: in the written order, since the
# first gateway's init is the store's first and the last test leaves the cluster with a new primary.
pytestmark = [pytest.mark.slow, pytest.mark.in_order]


@pytest.fixture(scope="module")
def store():
    yield from started(postgres_on=2)


def test_the_generated_configuration_elects_one_leader_and_a_synchronous_standby(store):
    members = {m["name"]: m for m in store.members()}
    assert sorted(members) == ["cp-1", "cp-2"]
    assert sorted(m["role"] for m in members.values()) in (["leader", "sync_standby"], ["leader", "replica"])
    # cp-3 carries no PostgreSQL: etcd's third member only, so no Patroni was written for it.
    assert not store.layouts["cp-3"].at(patroni.PATRONI_CONFIG).exists()


def test_the_bootstrap_made_llmgws_role_and_database_and_the_address_reaches_the_primary(store):
    url = patroni.store_address(store.machines, store.secrets)
    done = subprocess.run([os.path.join(patroni.BIN_DIR, "psql"), url, "-Atc",
                           "SELECT current_user, current_database(), pg_is_in_recovery()"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "llmgw|llmgw|f"


def test_llmgw_server_on_the_generated_store_address_serves(store, servers):
    url = patroni.store_address(store.machines, store.secrets)
    gw = servers("gw", store=url)
    made = gw.init("--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["already"] is False
    gw.start()
    # /health answers before the first lease is taken: leading follows within the lease's first round.
    wait_until(gw.leads, 30, "llmgw server on the generated store leads")
    status = gw.ctl_json("ctl", "status")
    assert status["store"]["up"] is True, status


def test_patronis_rest_api_refuses_a_restart_from_anyone_without_its_password(store):
    primary = store.primary()
    assert primary is not None
    request = urllib.request.Request(f"http://127.0.0.1:{primary.ports.patroni}/restart", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    assert store.primary() == primary


def test_written_again_every_file_is_unchanged(store):
    said = store.write()
    assert {p.state for p in said} == {"unchanged"}, [p.shown() for p in said]


def _store_up(gw) -> bool:
    done = gw.ctl("ctl", "status", "--json")
    return done.returncode == 0 and json.loads(done.stdout)["store"]["up"] is True


def _writes_go_to(url: str) -> str | None:
    """Which port takes llmgw's writes now, through the generated address; None while none does."""
    done = subprocess.run([os.path.join(patroni.BIN_DIR, "psql"), url + "&connect_timeout=2", "-Atc",
                           "SELECT current_setting('port') WHERE NOT pg_is_in_recovery()"],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or None if done.returncode == 0 else None


def test_when_the_primarys_postgresql_dies_the_standby_takes_the_writes_and_the_gateway_follows(store, servers):
    # Last in this file: it leaves the cluster with a new primary.
    url = patroni.store_address(store.machines, store.secrets)
    gw = servers("gw2", store=url)
    assert gw.init("--json").returncode == 0
    gw.start()
    old = store.primary()
    assert old is not None
    store.kill_postgres(old)
    killed = time.monotonic()

    new = wait_until(lambda: (p := store.primary()) is not None and p != old and p, 60,
                     "the standby was promoted")
    promoted = time.monotonic() - killed
    assert wait_until(lambda: _writes_go_to(url), 60, "the generated address reaches a primary") == \
        str(new.ports.postgres)
    wait_until(lambda: _store_up(gw), 60, "llmgw ctl status says the store answers")
    print(f"\nthe standby {new.name} was promoted {promoted:.1f} s after {old.name}'s PostgreSQL was killed; "
          f"the gateway's store answered again {time.monotonic() - killed:.1f} s after")
