"""The three-machine store's files as llmgw writes them: etcd's, Patroni's, the passwords, the plan and the address.

That they work is tests/integration/test_three_machine_store.py's: these
pin what each machine is given and what a person is shown.
"""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from llmgw.config import ServerConfig
from llmgw.config.storeaddress import postgres_hosts, session_attrs
from llmgw.onboard import hastore, patroni
from llmgw.onboard.layout import Layout
from llmgw.onboard.patroni import StoreMachine, StoreSecrets, StoreSetupError
from llmgw.onboard.units import read_environment

THREE = [StoreMachine("cp-1", "10.0.0.5"), StoreMachine("cp-2", "10.0.0.6"),
         StoreMachine("cp-3", "10.0.0.7", postgres=False)]


@pytest.fixture
def secrets_(tmp_path):
    return StoreSecrets.load_or_make(tmp_path / "store")


def test_the_passwords_are_made_once_in_files_only_root_reads_and_never_shown(tmp_path):
    made = StoreSecrets.load_or_make(tmp_path / "store")
    again = StoreSecrets.load_or_make(tmp_path / "store")
    assert made == again
    assert len({made.superuser, made.replication, made.app, made.rest}) == 4
    for name in StoreSecrets.NAMES:
        assert stat.S_IMODE(os.stat(tmp_path / "store" / f"{name}.password").st_mode) == 0o600
    assert made.app not in repr(made) and made.superuser not in repr(made)


def test_each_machine_is_one_of_three_etcd_members_of_the_same_cluster():
    envs = [read_environment(patroni.etcd_environment(THREE, m)) for m in THREE]
    assert [e["ETCD_NAME"] for e in envs] == ["cp-1", "cp-2", "cp-3"]
    assert {e["ETCD_INITIAL_CLUSTER"] for e in envs} == {
        "cp-1=http://10.0.0.5:2380,cp-2=http://10.0.0.6:2380,cp-3=http://10.0.0.7:2380"}
    assert len({e["ETCD_INITIAL_CLUSTER_TOKEN"] for e in envs}) == 1
    assert envs[1]["ETCD_LISTEN_CLIENT_URLS"] == "http://10.0.0.6:2379,http://127.0.0.1:2379"
    # Not Debian's default data directory, where the package's one-member etcd already lives.
    assert envs[0]["ETCD_DATA_DIR"] == "/var/lib/etcd/llmgw"


def test_patroni_is_given_postgresql_15_from_debian_every_etcd_member_and_the_chosen_timings(secrets_):
    config = patroni.patroni_config(THREE, THREE[1], secrets_)
    assert config["postgresql"]["bin_dir"] == "/usr/lib/postgresql/15/bin"
    assert config["postgresql"]["listen"] == "10.0.0.6:5432"
    assert config["restapi"]["connect_address"] == "10.0.0.6:8008"
    assert config["etcd3"]["hosts"] == ["10.0.0.5:2379", "10.0.0.6:2379", "10.0.0.7:2379"]
    dcs = config["bootstrap"]["dcs"]
    assert (dcs["ttl"], dcs["loop_wait"], dcs["retry_timeout"]) == (20, 5, 5)
    # Patroni's own rule: a primary cut off from etcd steps down before another can take the key.
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    assert dcs["synchronous_mode"] is True and dcs["maximum_lag_on_failover"] == 1048576


def test_postgresql_lets_in_only_the_three_machines_and_loopback_by_password():
    rules = patroni.pg_hba(THREE)
    hosts = [r for r in rules if r.startswith("host ")]
    assert all(r.endswith("scram-sha-256") for r in hosts)
    assert {r.split()[3] for r in hosts} == {"127.0.0.1/32", "::1/128", "10.0.0.5/32", "10.0.0.6/32", "10.0.0.7/32"}
    # Replication only from the machines that carry PostgreSQL.
    assert [r.split()[3] for r in hosts if r.split()[1] == "replication"] == ["10.0.0.5/32", "10.0.0.6/32"]


def test_a_machine_without_postgresql_is_given_no_patroni(secrets_):
    with pytest.raises(StoreSetupError, match="cp-3 carries no PostgreSQL"):
        patroni.patroni_config(THREE, THREE[2], secrets_)


def test_the_store_address_names_every_postgresql_host_and_asks_for_the_primary(secrets_):
    url = patroni.store_address(THREE, secrets_)
    assert postgres_hosts(url) == ["10.0.0.5:5432", "10.0.0.6:5432"]
    assert session_attrs(url) == "read-write"
    assert url.startswith(f"postgresql://llmgw:{secrets_.app}@")
    ServerConfig(store=url).validate()


def test_ipv6_machines_are_written_in_brackets(secrets_):
    six = [StoreMachine("a", "fd00::5"), StoreMachine("b", "fd00::6"), StoreMachine("c", "fd00::7")]
    assert postgres_hosts(patroni.store_address(six, secrets_)) == ["[fd00::5]:5432", "[fd00::6]:5432",
                                                                    "[fd00::7]:5432"]
    assert "a=http://[fd00::5]:2380" in patroni.etcd_environment(six, six[0])
    assert "host all all fd00::6/128 scram-sha-256" in patroni.pg_hba(six)


@pytest.mark.parametrize("machines, said", [
    (THREE[:2], "the store needs three machines, given 2"),
    ([THREE[0], THREE[1], StoreMachine("cp-1", "10.0.0.9")], "three names, given cp-1, cp-2, cp-1"),
    ([THREE[0], THREE[1], StoreMachine("cp-3", "db3.example")], "'db3.example' (for cp-3) is not an IP address"),
    ([THREE[0], StoreMachine("cp-2", "10.0.0.6", postgres=False), THREE[2]], "two of the three machines at least"),
    ([THREE[0], THREE[1], StoreMachine("CP_3", "10.0.0.7")], "'CP_3' cannot name a store member"),
    ([THREE[0], THREE[1], StoreMachine("cp-3", "10.0.0.5")], "share an address and a port"),
])
def test_machines_that_cannot_make_a_store_are_refused_with_what_to_change(machines, said):
    with pytest.raises(StoreSetupError) as refused:
        patroni.check_machines(machines)
    assert said in str(refused.value)


def test_the_plan_says_what_runs_where_without_a_password(secrets_):
    lines = hastore.plan(THREE, secrets_)
    shown = "\n".join(f"{line.machine}: {line.part}: {line.detail}" for line in lines)
    assert "cp-3: PostgreSQL: none here: etcd's third member and a control plane" in shown
    assert "cp-1: PostgreSQL: PostgreSQL 15 under Patroni on 5432" in shown
    assert "all three: store: postgresql://llmgw:***@10.0.0.5:5432,10.0.0.6:5432/llmgw" in shown
    assert "all three: firewall: PostgreSQL, Patroni's REST API and etcd open to the cluster's networks only" in shown
    for password in (secrets_.app, secrets_.superuser, secrets_.replication):
        assert password not in shown


def test_one_machines_files_are_written_private_and_written_again_unchanged(tmp_path, secrets_):
    layout = Layout(tmp_path / "cp-1")
    said: list = []
    hastore.write_machine(layout, THREE, THREE[0], secrets_, said.append)
    assert [(p.step, p.state) for p in said] == [
        ("etcd's configuration", "done"), ("Patroni's configuration", "done"), ("llmgw's store password", "done"),
        ("the store's first role and database", "done")]

    def mode(path: str) -> int:
        return stat.S_IMODE(os.stat(layout.at(path)).st_mode)

    assert mode(patroni.PATRONI_CONFIG) == 0o600  # it holds the superuser's and replication's passwords
    assert mode(patroni.APP_PASSWORD_FILE) == 0o600
    assert mode(patroni.BOOTSTRAP_SCRIPT) == 0o700
    assert mode(patroni.ETCD_ENVIRONMENT) == 0o644
    config = yaml.safe_load(layout.at(patroni.PATRONI_CONFIG).read_text())
    assert config["postgresql"]["data_dir"] == str(layout.at("/var/lib/postgresql/15/llmgw"))
    # The bootstrap reads llmgw's password from its file: it is on no command line.
    assert secrets_.app not in layout.at(patroni.BOOTSTRAP_SCRIPT).read_text()

    said.clear()
    hastore.write_machine(layout, THREE, THREE[0], secrets_, said.append)
    assert {p.state for p in said} == {"unchanged"}


def test_packages_are_never_installed_into_a_directory(tmp_path):
    with pytest.raises(hastore.StepFailed, match="installed on the machine itself"):
        hastore.install_packages(Layout(tmp_path), THREE[0])


def test_on_a_machine_with_debians_packages_nothing_is_installed_and_the_step_says_unchanged():
    # `build.py test` installs etcd-server, patroni, python3-etcd and postgresql (15 on Debian 12): this machine has
    # them.
    said: list = []
    hastore.install_packages(Layout(), THREE[0], said.append)
    assert [(p.step, p.state) for p in said] == [("Debian's packages", "unchanged")]
    assert hastore.missing_packages(THREE[2]) == []
