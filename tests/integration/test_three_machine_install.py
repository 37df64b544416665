"""`llmgw server init --install --machines FILE`: three machines made from the first, two of them over a real
sshd, each with its etcd, Patroni's PostgreSQL and a control plane, and a fourth for the guardrails' judge alone,
on loopback; run again and nothing changes.

The three are three install roots on this machine, each with ports of its own
(--machines gives them); the store's services run from Debian's own units
(etcd.service, patroni.service) under the supervised manager, Patroni as
postgres. The roots are outside pytest's folder, which postgres and etcd
cannot enter.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import pytest
import yaml

from llmgw.onboard import hastore, mirrorpart, patroni
from llmgw.onboard.hainstall import HaJob, HaMachine, check_others, check_there, reached
from llmgw.onboard.layout import Layout
from llmgw.onboard.parts import Choices
from llmgw.onboard.patroni import StoreMachine, StorePorts
from llmgw.onboard.services import SupervisedManager
from llmgw.onboard.ssh import Credentials, Target
from llmgw.onboard.steps import StepFailed
from llmgw.onboard.stopping import stop_install
from tests.support.pgcluster import free_port
from tests.support.pyz import pyz  # noqa: F401 - a fixture
from tests.support.servers import llmgw
from tests.support.sshd import keygen
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # three machines installed over SSH, with Patroni

ROLES = ("client", "agent", "admin", "metrics")
SERVER_UNIT = "llmgw-server.service"


@pytest.fixture
def three(sshd):
    """The three machines' entries for --machines, and their roots, and a fourth's for the judge alone;
    everything they run is stopped at the end: the judge's agent and engine, the control planes, then Patroni
    (which stops its PostgreSQL), then etcd."""
    if os.geteuid() != 0:
        pytest.fail("the three-machine install runs Patroni as postgres and etcd as etcd, which takes root "
                    "(CI runs as root)", pytrace=False)
    roots = [Path(tempfile.mkdtemp(prefix=f"llmgw-cp{i + 1}-")) for i in range(3)]
    machines = []
    for i, root in enumerate(roots):
        root.chmod(0o755)
        entry = {"name": f"cp-{i + 1}", "address": "127.0.0.1", "root": str(root),
                 "ports": {"postgres": free_port(), "patroni": free_port(), "etcd_client": free_port(),
                           "etcd_peer": free_port()},
                 "listen": {role: f"127.0.0.1:{free_port()}" for role in ROLES}}
        if i < 2:  # the first two get the model mirrors, a port each on this one host
            entry["listen"]["mirror"] = f"127.0.0.1:{free_port()}"
        if i:
            entry["ssh"] = f"root@127.0.0.1:{sshd.port}"
        machines.append(entry)
    judge_root = Path(tempfile.mkdtemp(prefix="llmgw-judge-"))
    judge_root.chmod(0o755)
    machines.append({"name": "guard-1", "role": "judge", "ssh": f"root@127.0.0.1:{sshd.port}",
                     "root": str(judge_root)})
    yield machines, roots
    stop_install(Layout(judge_root), SupervisedManager(Layout(judge_root)))
    shutil.rmtree(judge_root, ignore_errors=True)
    for unit in (mirrorpart.MIRROR_UNIT, SERVER_UNIT, hastore.PATRONI_UNIT, hastore.ETCD_UNIT):
        for root in roots:
            layout = Layout(root)
            if layout.unit_file(unit).exists():
                SupervisedManager(layout).stop(unit)
    for root in roots:
        pid_file = Path(hastore.paths_for(Layout(root)).data_dir) / "postmaster.pid"
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass
        shutil.rmtree(root, ignore_errors=True)


VIP = "198.51.100.160/24"


def an_interface() -> str:
    """An interface of this machine other than lo, for keepalived's file (nothing is started on it)."""
    found = [name for _, name in socket.if_nameindex() if name != "lo"]
    assert found, "the floating address's file names an interface, and this machine has none but lo"
    return found[0]


def install(machines_file: Path, sshd, program: Path):
    return llmgw("server", "init", "--install", "--machines", str(machines_file), "--key", str(sshd.client_key),
                 "--program", str(program), "--no-node", "--no-model", "--judge", "sim", "--no-firewall", "--mirror",
                 "--admin-email",
                 "ops@example.com", "--vip", VIP, "--vip-interface", an_interface(), "--wait", "90", "--json",
                 timeout=480)


def ctl(entry: dict, *args: str):
    done = llmgw("ctl", *args, "--json", "--admin", entry["listen"]["admin"], "--token-file",
                 str(Layout(Path(entry["root"])).server_data / "admin-token"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def status(entry: dict) -> dict:
    return ctl(entry, "status")


def test_three_machines_are_installed_from_the_first_each_a_control_plane_on_one_patroni_store(
        three, sshd, pyz, tmp_path):
    entries, roots = three
    machines, judge = entries[:3], entries[3]
    machines_file = tmp_path / "machines.yaml"
    machines_file.write_text(yaml.safe_dump(entries))

    done = install(machines_file, sshd, pyz)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout
    result = json.loads(done.stdout)
    assert result["password"] and result["api_key"]
    assert [s["name"] for s in result["standbys"]] == ["cp-2", "cp-3"]
    hosts = ",".join(f"127.0.0.1:{m['ports']['postgres']}" for m in machines)
    assert result["store"] == f"postgresql://llmgw:***@{hosts}/llmgw?target_session_attrs=read-write"
    progress = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    said = {(p["machine"], p["step"]) for p in progress if p["state"] == "done"}
    for name in ("cp-1", "cp-2", "cp-3"):
        assert (name, "etcd's configuration") in said and (name, "start etcd") in said
        assert (name, "Patroni's configuration") in said and (name, "start Patroni") in said
    assert ("all three", "wait for the store") in said
    # Both others were reached before anything was done here.
    first_reached = next(i for i, p in enumerate(progress) if p["step"] == "reach it")
    first_written = next(i for i, p in enumerate(progress) if p["step"] == "etcd's configuration")
    assert first_reached < first_written
    reach = {p["machine"]: p["sentence"] for p in progress if p["step"] == "reach it"}
    assert set(reach) == {"cp-1", "cp-2", "cp-3", "guard-1"}
    assert reach["cp-1"] == "reaches cp-2 and cp-3" and reach["cp-2"].endswith("; reaches cp-1 and cp-3")

    # Every server.yaml names the three PostgreSQL hosts; the password in it is for root and llmgw alone.
    for entry in machines:
        config = Layout(Path(entry["root"])).server_config
        assert yaml.safe_load(config.read_text())["store"].endswith(f"@{hosts}/llmgw?target_session_attrs=read-write")
        assert config.stat().st_mode & 0o777 == 0o640
    # keepalived's file on each, the same address and router id, each asking its own control plane whether it
    # leads; keepalived itself is the machine's, started by an install on the machine only.
    router_ids = set()
    for entry in machines:
        conf = (Path(entry["root"]) / "etc/keepalived/keepalived.conf").read_text()
        assert f"interface {an_interface()}\n" in conf and "198.51.100.160/24" in conf
        assert f"http://{entry['listen']['client']}/leader" in conf
        router_ids |= {line.split()[1] for line in conf.splitlines() if line.strip().startswith("virtual_router_id")}
    assert len(router_ids) == 1
    assert {p["machine"] for p in progress if p["step"] == "the floating address" and p["state"] == "done"} \
        == {"cp-1", "127.0.0.1"}

    # Patroni runs as postgres, from Debian's unit, in each root.
    for root in roots:
        pid = SupervisedManager(Layout(root)).status(hastore.PATRONI_UNIT).pid
        assert pid and Path(f"/proc/{pid}").stat().st_uid == patroni_uid()

    first = status(machines[0])
    assert first["name"] == "cp-1" and first["role"] == "leader" and first["store"]["up"] is True
    for entry in machines[1:]:
        wait_until(lambda e=entry: status(e)["leader"]["holder"].startswith("cp-1"), 30,
                   f"{entry['name']} follows cp-1")
        assert status(entry)["role"] == "standby"

    # The model mirror on the first two, each the other's peer, and the cluster told of both.
    mirrors = [f"https://{entry['listen']['mirror']}" for entry in machines[:2]]
    for entry, peer in zip(machines[:2], reversed(mirrors), strict=True):
        kept = yaml.safe_load(Layout(Path(entry["root"])).mirror_config.read_text())
        assert kept["listen"] == entry["listen"]["mirror"] and kept["peers"] == [peer]
        assert SupervisedManager(Layout(Path(entry["root"]))).status(mirrorpart.MIRROR_UNIT).active
    assert not Layout(Path(machines[2]["root"])).mirror_config.exists()
    setting = llmgw("ctl", "config", "get", "mirror", "--json", "--admin", machines[0]["listen"]["admin"],
                    "--token-file", str(Layout(Path(machines[0]["root"])).server_data / "admin-token"))
    assert setting.returncode == 0, setting.stderr
    value = json.loads(setting.stdout)["value"]
    assert (value["url"], value["peers"]) == (mirrors[0], [mirrors[1]])

    # The judge on its own machine: reached with the others before anything was done, added as a node labelled
    # llmgw.role=judge, and the judge's every replica there; the baseline policy asks it.
    assert reach["guard-1"].startswith(f"root@127.0.0.1:{sshd.port}; host key ")
    assert result["judge"] == "judge-sim"
    [node] = [n for n in ctl(machines[0], "nodes") if n["name"] == "guard-1"]
    assert node["labels"] == {"llmgw.role": "judge"}
    assert yaml.safe_load(Layout(Path(judge["root"])).agent_config.read_text())["labels"] == {"llmgw.role": "judge"}
    placed = ctl(machines[0], "replicas", "--model", "judge-sim")
    assert placed and {r["node_id"] for r in placed} == {node["id"]}
    said_judge = next(p["sentence"] for p in progress if p["step"] == "judge_nodes" and p["state"] == "done")
    assert said_judge.startswith("guard-1 (") and said_judge.endswith(": nodes kept for the judges (llmgw.role=judge)")

    again = install(machines_file, sshd, pyz)
    assert again.returncode == 0, again.stderr[-4000:]
    progress = [json.loads(line) for line in again.stderr.splitlines() if line.startswith("{")]
    changed = [(p["machine"], p["step"], p["sentence"]) for p in progress if p["state"] == "done"
               and p["step"] not in ("reach it", "log in", "check the machine", "wait for the store",
                                     "wait for the standby to answer")]
    assert changed == [], changed
    assert json.loads(again.stdout)["password"] is None  # shown once, at its making


def patroni_uid() -> int:
    import pwd

    return pwd.getpwnam(patroni.SUPERUSER).pw_uid


def loopback(name: str) -> StoreMachine:
    """A machine on loopback with ports nothing listens on: reached, and answered "nothing here yet"."""
    return StoreMachine(name, "127.0.0.1", ports=StorePorts(free_port(), free_port(), free_port(), free_port()))


def test_the_setup_screens_check_of_another_machine_logs_in_as_the_install_will_and_says_what_it_found(
        sshd, pyz, tmp_path):
    other = HaMachine(loopback("cp-2"), ssh=Target.parse(f"root@127.0.0.1:{sshd.port}"))
    job = HaJob(machines=[HaMachine(loopback("cp-1")), other, HaMachine(loopback("cp-3"))],
                credentials=Credentials(str(sshd.client_key), None, None), known_hosts=tmp_path / "known_hosts",
                program=pyz)
    said = asyncio.run(check_there(job, other))
    assert said.startswith(f"root@127.0.0.1:{sshd.port}; host key SHA256:")
    assert said.endswith(f"; python3 {python_here()}, {platform.machine()}; reaches cp-1 and cp-3")
    assert asyncio.run(check_there(job, other)).split("; ")[1] == "host key as recorded"

    stranger = HaJob(machines=[], credentials=Credentials(str(keygen(tmp_path / "stranger")), None, None),
                     known_hosts=tmp_path / "known_hosts", program=pyz)
    with pytest.raises(StepFailed) as refused:
        asyncio.run(check_there(stranger, other))
    assert refused.value.sentence.startswith(f"root@127.0.0.1:{sshd.port} did not accept the key ")


def test_a_machine_that_cannot_reach_another_is_named_with_the_port_and_what_to_look_at():
    # What the probe says of a port a firewall drops (this sandbox answers every address, so it is given).
    with pytest.raises(StepFailed) as unreachable:
        reached("cp-2", {"10.0.0.7:2380": "cp-3", "10.0.0.5:2380": "cp-1"},
                {"10.0.0.7:2380": "timed out", "10.0.0.5:2380": "refused"})
    assert unreachable.value.sentence == ("cp-2 cannot reach cp-3 at 10.0.0.7:2380 (timed out); the three must reach "
                                          "one another on etcd's, Patroni's and PostgreSQL's ports: a firewall "
                                          "between them, or a wrong address?")
    assert reached("cp-1", {"10.0.0.6:2380": "cp-2"}, {"10.0.0.6:2380": "refused"}) == "reaches cp-2"


def test_the_setup_screens_refuse_two_machines_at_one_address_before_logging_in(sshd):
    choices = Choices(machines=3, root="/tmp/never-made")
    for other in choices.others:
        other.address, other.auth = f"127.0.0.1:{sshd.port}", "agent"
    checks = check_others(choices)
    assert [(c.machine, c.name, c.state) for c in checks] == [("the three", "reach", "fail")]
    assert "share an address and a port" in checks[0].sentence
    assert "Accepted" not in sshd.output()


def python_here() -> str:
    import subprocess

    return subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}).stdout.strip()
