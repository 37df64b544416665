"""`llmgw node add --ssh` against a real sshd: the archive copied, the node installed into a root directory,
joined, supervised and serving; run again and nothing changes; a wrong key is one sentence."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
from pathlib import Path

import openai
import pytest
import yaml

from llmgw.agent.nodelock import LOCK_NAME
from llmgw.agent.statefile import STATE, WARNINGS
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import SupervisedManager
from llmgw.release.watchdog import CONFIRMED
from tests.support.pyz import carrying, pyz, with_version  # noqa: F401 - pyz is a fixture
from tests.support.servers import llmgw
from tests.support.sshd import Sshd, SudoUser, keygen
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow  # installs over SSH from llmgw.pyz

UNIT = "llmgw-agent.service"
# What the running agent writes itself (agent-state.json every 3 s): a run of the install that finds nothing
# to change leaves the install's files alone, not these. CI once saw the state file rewritten mid-run.
AGENT_RECORDS = {STATE, WARNINGS, LOCK_NAME, CONFIRMED}


@pytest.fixture
def node_root(tmp_path):
    """The remote machine's install root; its supervised agent and the engines it left are stopped at the end."""
    root = tmp_path / "node-root"
    root.mkdir()
    yield root
    layout = Layout(root)
    if layout.unit_file(UNIT).exists():
        SupervisedManager(layout).stop(UNIT)
    # KillMode=process leaves the engines running, as on a real node; the test started them, so it ends them.
    for record in layout.agent_data.glob("engines-run/shards/*/record.json"):
        try:
            os.killpg(json.loads(record.read_text())["pgid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


SUDO_PASSWORD = "sudo-says-" + os.urandom(6).hex()


@pytest.fixture
def sudoer(sshd):
    """A user of this machine who logs in with the test's key and whose sudo asks for SUDO_PASSWORD."""
    user = SudoUser(sshd, SUDO_PASSWORD)
    yield user
    user.remove()


def as_sudoer(server, sshd, sudoer, root: Path, program: Path, *extra: str, stdin: str | None = None):
    return llmgw("node", "add", "--ssh", f"{sudoer.name}@127.0.0.1:{sshd.port}", "--key", str(sshd.client_key),
                 "--root", str(root), "--program", str(program), "--wait", "90", *extra,
                 "--admin", server.admin, "--token-file", server.token_file, stdin=stdin, timeout=300)


def node_add(server, sshd, root: Path, program: Path, *extra: str):
    return server.ctl("node", "add", "--ssh", f"root@127.0.0.1:{sshd.port}", "--key", str(sshd.client_key),
                      "--root", str(root), "--program", str(program), "--wait", "90", *extra, timeout=300)


def snapshot(root: Path) -> dict[str, tuple[float, str]]:
    """Every file the install wrote (not the agent's own records and logs), with its mtime and sha256."""
    kept = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if not path.is_file() or relative.startswith(("var/log/", "run/", "var/cache/", "var/lib/llmgw-agent/engines")):
            continue
        if relative.startswith("var/lib/llmgw-agent/") and path.name in AGENT_RECORDS:
            continue
        kept[relative] = (path.stat().st_mtime, hashlib.sha256(path.read_bytes()).hexdigest())
    return kept


def ask(server, model: str):
    client = openai.OpenAI(api_key=server.first_key, base_url=server.client_url + "/v1", max_retries=0, timeout=10)
    try:
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                               max_tokens=8)
    except (openai.APIError, openai.APIConnectionError):
        return None
    return reply.choices[0].message.content


def test_node_add_over_ssh_installs_a_node_that_serves_a_model_and_a_second_run_changes_nothing(
        server, sshd, node_root, pyz, tmp_path):
    done = node_add(server, sshd, node_root, pyz, "--name", "ssh-node", "--label", "rack=r1", "--json")
    assert done.returncode == 0, done.stderr + sshd.output()
    first = json.loads(done.stdout)
    states = {step["step"]: step["state"] for step in first["steps"]}
    assert states == {"log in": "done", "check the machine": "done", "copy the program": "done",
                      "make the llmgw user and directories": "done", "write agent.yaml": "done",
                      "join the cluster": "done", "install the service": "done", "start the service": "done",
                      "wait for the node to report": "done"}
    assert first["node"]["name"] == "ssh-node"
    login = first["steps"][0]["sentence"]
    assert "host key SHA256:" in login and "recorded in" in login
    known = (server.data_dir / "known_hosts").read_text()
    assert known == f"[127.0.0.1]:{sshd.port} ssh-ed25519 {sshd.host_public_key}\n"

    layout = Layout(node_root)
    assert layout.program.read_bytes() == pyz.read_bytes()
    config = yaml.safe_load(layout.agent_config.read_text())
    assert config["data_dir"] == str(layout.agent_data) and config["name"] == "ssh-node"
    assert config["control_planes"] == [f"127.0.0.1:{server.ports['agent']}"]
    assert config["labels"] == {"rack": "r1"}
    node = next(n for n in server.ctl_json("ctl", "nodes") if n["name"] == "ssh-node")
    assert node["labels"] == {"rack": "r1"}

    spec = tmp_path / "simmy.yaml"
    spec.write_text(yaml.safe_dump({"name": "simmy", "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                    "memory": "256MB"}]}))
    assert server.ctl("ctl", "model", "add", "-f", str(spec)).returncode == 0
    answer, _ = wait_for(lambda: ask(server, "simmy"), timeout=90, interval=0.5)
    assert answer, server.output() + (layout.logs / f"{UNIT}.log").read_text()

    before = snapshot(node_root)
    pid = SupervisedManager(layout).status(UNIT).pid
    again = node_add(server, sshd, node_root, pyz, "--name", "ssh-node", "--label", "rack=r1", "--json")
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    changing = {step["step"]: step["state"] for step in second["steps"]
                if step["step"] not in ("log in", "check the machine")}
    assert set(changing.values()) == {"unchanged"}, second["steps"]
    assert len(changing) == 7
    assert snapshot(node_root) == before
    assert SupervisedManager(layout).status(UNIT).pid == pid
    assert second["node"] == first["node"]
    assert second["steps"][0]["sentence"].endswith("host key as recorded")


def test_a_new_program_is_copied_and_the_agent_restarted_once_while_its_engine_keeps_answering(
        server, sshd, node_root, pyz, tmp_path):
    assert node_add(server, sshd, node_root, pyz).returncode == 0
    spec = tmp_path / "simmy.yaml"
    spec.write_text(yaml.safe_dump({"name": "simmy", "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                    "memory": "256MB"}]}))
    assert server.ctl("ctl", "model", "add", "-f", str(spec)).returncode == 0
    assert wait_for(lambda: ask(server, "simmy"), timeout=90, interval=0.5)[0]
    layout = Layout(node_root)
    before = SupervisedManager(layout).status(UNIT).pid

    newer = with_version(pyz, "0.1.1", tmp_path / "newer.pyz")
    done = node_add(server, sshd, node_root, newer, "--json")
    assert done.returncode == 0, done.stderr
    states = {step["step"]: (step["state"], step["sentence"]) for step in json.loads(done.stdout)["steps"]}
    assert states["copy the program"][0] == "done"
    assert states["write agent.yaml"][0] == states["join the cluster"][0] == "unchanged"
    assert states["start the service"][0] == "done"
    assert states["start the service"][1].startswith("restarted for its new files")
    after = SupervisedManager(layout).status(UNIT).pid
    assert after != before

    def version() -> str:
        nodes = server.ctl_json("ctl", "nodes")
        return nodes[0].get("version", "") if nodes else ""

    assert wait_for(lambda: version() == "0.1.1", timeout=60, interval=0.5)[0], version()
    assert ask(server, "simmy")
    assert "adopted 1 engine(s)" in (layout.logs / f"{UNIT}.log").read_text()


def test_a_key_the_machine_does_not_know_is_refused_with_one_sentence(server, sshd, node_root, pyz, tmp_path):
    stranger = keygen(tmp_path / "stranger")
    done = server.ctl("node", "add", "--ssh", f"root@127.0.0.1:{sshd.port}", "--key", str(stranger),
                      "--root", str(node_root), "--program", str(pyz))
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: root@127.0.0.1:{sshd.port} did not accept the key {stranger}; put its public "
                           "key in ~root/.ssh/authorized_keys there, or give --key FILE or --password\n")
    assert not any(node_root.iterdir())


def test_a_host_showing_another_key_than_the_one_recorded_is_refused_before_logging_in(server, sshd, node_root,
                                                                                       pyz):
    (server.data_dir / "known_hosts").write_text(
        f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE5l0m8lmzIyl7bVHLtO6Rrz5Q36S1ZTwbqI3YZsO7LV\n")
    done = node_add(server, sshd, node_root, pyz)
    assert done.returncode == 1
    message = done.stderr.strip()
    assert len(message.splitlines()) == 1
    assert message.startswith(f"llmgw: [127.0.0.1]:{sshd.port} now shows the host key SHA256:")
    assert f"remove its line from {server.data_dir / 'known_hosts'}" in message
    assert "Accepted publickey" not in sshd.output()


def test_node_add_ssh_from_a_checkout_without_an_archive_says_how_to_build_one(server, sshd, node_root):
    done = server.ctl("node", "add", "--ssh", f"root@127.0.0.1:{sshd.port}", "--key", str(sshd.client_key),
                      "--root", str(node_root))
    assert done.returncode == 1
    assert "build one with `python3 build.py dist` and give --program dist/llmgw.pyz" in done.stderr


def test_plain_node_add_refuses_ssh_options_without_ssh(server):
    done = llmgw("node", "add", "--root", "/tmp/x", "--admin", server.admin, "--token-file", server.token_file)
    assert done.returncode == 2
    assert done.stderr == "llmgw: --root is for installing over SSH; give --ssh USER@HOST too\n"


def test_a_machine_whose_python_the_archive_does_not_carry_is_refused_before_anything_is_copied(
        server, sshd, node_root, pyz, tmp_path):
    elsewhere = carrying(pyz, ["3.98", "3.99"], tmp_path / "elsewhere.pyz")
    done = node_add(server, sshd, node_root, elsewhere)
    assert done.returncode == 1
    here = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}).stdout.strip()
    assert done.stderr == (f"llmgw: 127.0.0.1's python3 is {here}, and elsewhere.pyz carries CPython 3.98, 3.99 "
                           f"on Linux {platform.machine()}; install one of those there, or build the program with "
                           f"`python3 build.py dist --python {here}`\n")
    assert not Layout(node_root).program.exists()


def test_a_wrong_password_is_refused_with_one_sentence_and_never_shown(servers, server, node_root, pyz, tmp_path):
    daemon = Sshd(tmp_path / "pw", passwords=True).start()
    try:
        secret = "not-the-password-" + os.urandom(4).hex()
        done = llmgw("node", "add", "--ssh", f"root@127.0.0.1:{daemon.port}", "--password", "--root",
                     str(node_root), "--program", str(pyz), "--admin", server.admin, "--token-file",
                     server.token_file, stdin=secret + "\n")
    finally:
        daemon.stop()
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: root@127.0.0.1:{daemon.port} did not accept the password given; check it "
                           "(and that sshd there allows passwords), or log in with --key FILE\n")
    assert secret not in done.stdout + done.stderr + daemon.output()


def test_a_user_whose_sudo_asks_a_password_installs_a_node_as_root_and_the_password_is_never_shown(
        server, sshd, sudoer, node_root, pyz):
    # Every command after the first goes through `sudo -S` again: had sudo remembered the first password
    # (its timestamp), the next one would have been read by the command as its plan.
    done = as_sudoer(server, sshd, sudoer, node_root, pyz, "--sudo-password", "--name", "sudo-node", "--json",
                     stdin=SUDO_PASSWORD + "\n")
    assert done.returncode == 0, done.stderr + sshd.output()
    report = json.loads(done.stdout)
    assert {step["state"] for step in report["steps"]} == {"done"}, report["steps"]
    assert report["node"]["name"] == "sudo-node"
    assert report["steps"][0]["sentence"].startswith(f"{sudoer.name}@127.0.0.1:{sshd.port}; host key SHA256:")
    program = Layout(node_root).program
    assert program.read_bytes() == pyz.read_bytes() and program.stat().st_uid == 0

    seen = done.stdout + done.stderr + server.output()
    seen += "".join(path.read_text(errors="replace") for path in node_root.rglob("*")
                    if path.is_file() and path.stat().st_size < 1 << 20)
    assert SUDO_PASSWORD not in seen


def test_a_user_whose_sudo_asks_a_password_and_none_is_given_is_told_to_give_one(server, sshd, sudoer, node_root,
                                                                                  pyz):
    done = as_sudoer(server, sshd, sudoer, node_root, pyz)
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: sudo on 127.0.0.1 asks {sudoer.name} for a password; give --sudo-password "
                           "(it is read from the terminal)\n")
    assert not any(node_root.iterdir())


def test_a_wrong_sudo_password_is_refused_with_one_sentence_and_never_shown(server, sshd, sudoer, node_root, pyz):
    wrong = "not-it-" + os.urandom(4).hex()
    done = as_sudoer(server, sshd, sudoer, node_root, pyz, "--sudo-password", stdin=wrong + "\n")
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: sudo on 127.0.0.1 did not take the password given for {sudoer.name} (or "
                           f"{sudoer.name} may not use sudo there)\n")
    assert wrong not in done.stdout + done.stderr + sshd.output()
    assert not any(node_root.iterdir())


def test_a_user_with_sudo_that_asks_nothing_needs_no_password(server, sshd, node_root, pyz, tmp_path):
    user = SudoUser(sshd, "unused-" + os.urandom(4).hex(), nopasswd=True)
    try:
        # The check runs python3 as root before anything is copied: an archive for other Pythons stops the
        # install there, which is as far as this needs to go to show that sudo let it in.
        elsewhere = carrying(pyz, ["3.98", "3.99"], tmp_path / "elsewhere.pyz")
        done = as_sudoer(server, sshd, user, node_root, elsewhere)
    finally:
        user.remove()
    assert done.returncode == 1
    assert "'s python3 is " in done.stderr and "elsewhere.pyz carries CPython 3.98, 3.99" in done.stderr
    assert not Layout(node_root).program.exists()
