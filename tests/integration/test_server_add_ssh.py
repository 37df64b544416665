"""`llmgw server add --ssh`: a standby control plane installed over a real sshd into a root directory, sharing the
leader's PostgreSQL store and master key; run again and nothing changes; a SQLite store is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from llmgw.onboard.layout import Layout
from llmgw.onboard.services import SupervisedManager
from tests.support.pgcluster import free_port
from tests.support.pyz import pyz  # noqa: F401 - a fixture
from tests.support.servers import llmgw
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # an install over SSH from llmgw.pyz

UNIT = "llmgw-server.service"


@pytest.fixture
def standby_root(tmp_path):
    root = tmp_path / "standby-root"
    root.mkdir()
    yield root
    layout = Layout(root)
    if layout.unit_file(UNIT).exists():
        SupervisedManager(layout).stop(UNIT)


def test_server_add_over_ssh_installs_a_standby_that_shares_the_store_and_master_key_and_a_rerun_changes_nothing(
        servers, postgres_cluster, sshd, standby_root, pyz, tmp_path):
    url = postgres_cluster.create_database()
    config = tmp_path / "cp-a.yaml"
    config.write_text(yaml.safe_dump({"store": url, "data_dir": str(tmp_path / "cp-a")}))
    leader = servers("cp-a", store=url, config=str(config))
    assert leader.init().returncode == 0
    leader.start()
    wait_until(leader.leads, 30, "cp-a leads")
    ports = {role: free_port() for role in ("client", "agent", "admin", "metrics")}
    command = ["server", "add", "--ssh", f"root@127.0.0.1:{sshd.port}", "--key", str(sshd.client_key),
               "--root", str(standby_root), "--program", str(pyz), "--config", str(config), "--name", "cp-b",
               "--wait", "90", "--json", *[f"--standby-listen={role}=127.0.0.1:{port}" for role, port in ports.items()]]

    done = llmgw(*command, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    first = json.loads(done.stdout)
    states = {step["step"]: step["state"] for step in first["steps"]}
    assert states == {"log in": "done", "check the machine": "done", "copy the program": "done",
                      "make the llmgw user and directories": "done", "write server.yaml": "done",
                      "put the master key in place": "done", "install the service": "done",
                      "start the service": "done", "wait for the standby to answer": "done"}
    layout = Layout(standby_root)
    assert (layout.server_data / "master-key").read_bytes() == (tmp_path / "cp-a" / "master-key").read_bytes()
    written = yaml.safe_load(layout.server_config.read_text())
    assert written["store"] == url and written["name"] == "cp-b"

    # The standby takes agents (the master key unseals the cluster CA) and follows cp-a.
    status = json.loads(llmgw("ctl", "status", "--json", "--admin", f"127.0.0.1:{ports['admin']}",
                              "--token-file", str(layout.server_data / "admin-token")).stdout)
    assert status["name"] == "cp-b" and status["role"] == "standby"
    assert status["leader"]["holder"].startswith("cp-a")
    assert status["agents"]["taking"], status["agents"]

    pid = SupervisedManager(layout).status(UNIT).pid
    again = llmgw(*command, timeout=300)
    assert again.returncode == 0, again.stderr
    steps = json.loads(again.stdout)["steps"]
    changing = {s["step"]: s["state"] for s in steps if s["step"] not in ("log in", "check the machine")}
    assert changing.pop("wait for the standby to answer") == "done"  # a wait, which changes nothing
    assert set(changing.values()) == {"unchanged"}, steps
    assert SupervisedManager(layout).status(UNIT).pid == pid


def test_a_standby_for_a_sqlite_store_is_refused_before_logging_in(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump({"store": f"sqlite:{tmp_path / 'llmgw.db'}", "data_dir": str(tmp_path)}))
    done = llmgw("server", "add", "--ssh", "root@127.0.0.1:1", "--config", str(config), "--program", "x.pyz")
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: this control plane's store is sqlite:{tmp_path / 'llmgw.db'}, a file only this "
                           "machine can open; a standby needs the store in PostgreSQL (docs/store.md says how to "
                           "move to it), then run again\n")


def test_server_add_without_vip_or_ssh_says_which_to_give():
    done = llmgw("server", "add")
    assert done.returncode == 2
    assert done.stderr == ("llmgw: server add needs --vip ADDR/LEN (the floating address), or --ssh USER@HOST to "
                           "install a standby there\n")
