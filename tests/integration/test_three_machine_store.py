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

import pytest

from llmgw.onboard import patroni
from tests.support.storemachines import StoreMachines


@pytest.fixture(scope="module")
def store():
    try:
        machines = StoreMachines(postgres_on=2)
    except RuntimeError as e:
        # Fail, never skip: a skipped store test passes while the store goes untested.
        pytest.fail(str(e), pytrace=False)
    try:
        machines.start()
        yield machines
    finally:
        machines.destroy()


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
    assert gw.leads()
    status = gw.ctl_json("ctl", "status")
    assert status["store"]["up"] is True, status


def test_written_again_every_file_is_unchanged(store):
    said = store.write()
    assert {p.state for p in said} == {"unchanged"}, [p.shown() for p in said]
