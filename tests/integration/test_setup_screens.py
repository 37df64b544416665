"""`llmgw setup` in a terminal, from nothing to a first answer; and `server init --install`, its script form.

The screens run in a detached tmux session of a fixed size and are answered
with keys, as a person would; the install goes into a root directory the
test made, with supervised services on ports the test picked. What the
screens showed is kept in var/e2e/setup/ (or $LLMGW_E2E_OUT/setup), where
docs/setup.md's captures come from; those holding nothing of the run must be
in docs/setup.md as they are, so the install guide at /install stays current.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from llmgw.control.adminclient import AdminClient
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import service_manager
from tests.support.installs import end_install
from tests.support.pgcluster import free_port
from tests.support.pyz import pyz  # noqa: F401 - a fixture: the llmgw.pyz of this checkout, built once
from tests.support.sshd import Sshd
from tests.support.tmux import Terminal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # installs from llmgw.pyz through the setup screens

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("client", "agent", "admin", "metrics")


def captures_dir() -> Path:
    base = Path(os.environ["LLMGW_E2E_OUT"]) if os.environ.get("LLMGW_E2E_OUT") else ROOT / "var" / "e2e"
    out = base / "setup"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def install_root(tmp_path):
    """A root to install into and the ports its listeners take; whatever the install started is ended after."""
    root = tmp_path / "root"
    ports = {role: free_port() for role in ROLES}
    yield root, ports
    end_install(root, f"127.0.0.1:{ports['admin']}", root / "var/lib/llmgw/admin-token")


def screen_text(screen: str) -> str:
    """A captured screen as the guide shows it: trailing blanks gone, a run of empty lines kept as one."""
    lines: list[str] = []
    for line in screen.strip("\n").splitlines():
        if line.rstrip() or (lines and lines[-1]):
            lines.append(line.rstrip())
    return "\n".join(lines).strip("\n")


def in_the_guide(screen: str, what: str) -> None:
    """docs/setup.md, the install guide every gateway serves at /install, shows this screen as it is now."""
    guide = (ROOT / "docs" / "setup.md").read_text()
    shown = {screen_text(block) for block in re.findall(r"```\n(.*?)```", guide, re.S)}
    assert screen_text(screen) in shown, (
        f"docs/setup.md's {what} screen is not what the screens show now; put this in its place:\n"
        f"{screen_text(screen)}")


def listen_flags(ports: dict[str, int]) -> list[str]:
    return [arg for role in ROLES for arg in (f"--listen-{role}", f"127.0.0.1:{ports[role]}")]


def test_the_setup_screens_install_one_machine_from_nothing_to_a_first_answer(install_root, pyz):
    # As a newcomer does it: `sudo python3 llmgw.pyz` on a bare machine, here with the screens' own command
    # (`llmgw` alone opens them where nothing is installed, and would install into /) and a root to install into.
    root, ports = install_root
    argv = [sys.executable, str(pyz), "setup", "--root", str(root), "--services", "supervised",
            *listen_flags(ports)]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    term = Terminal(argv, env, str(root.parent), root.parent)
    shots = captures_dir()
    try:
        machines = term.wait_for("Is this one machine, or three")
        shots.joinpath("1-machines.txt").write_text(machines)
        # The screens that hold nothing of this run (no port, no path, no secret) are in the guide as they are.
        in_the_guide(machines, "one machine or three")
        term.keys("n")
        parts = term.wait_for("the parts of an install")
        assert "[ ] Model mirror" in parts and "[-] Pictures and 3D             installed by hand" in parts
        # An install into a directory cannot write the machine's firewall: it starts off, and the next step works.
        assert "[x] Starter model" in parts and "[ ] Firewall" in parts
        shots.joinpath("2-parts.txt").write_text(parts)
        in_the_guide(parts, "parts of an install")

        # Down to the starter model (control, store, mirror, node, starter) and open its settings.
        term.keys("Down", "Down", "Down", "Down", "Enter")
        dialog = term.wait_for("Simulated model (no internet, no weights)")
        assert "Qwen3 8B" in dialog and "Another GGUF on Hugging Face" in dialog
        shots.joinpath("3-starter.txt").write_text(dialog)
        in_the_guide(dialog, "starter model")
        term.keys("Space")  # the first choice, which has the focus: the simulated model
        term.wait_for("(X) Simulated model")
        term.keys("Escape")
        term.wait_for("on: sim")
        term.keys("n")

        checks = term.wait_for("Every check passed.")
        assert f"port {ports['client']} (client) is free" in checks
        shots.joinpath("4-checks.txt").write_text(checks)
        term.keys("n")
        planned = term.wait_for("The same install from a script:")
        assert "--starter sim --no-firewall" in planned
        assert " - Firewall: left out" in planned
        shots.joinpath("5-plan.txt").write_text(planned)
        term.keys("i")

        end = term.wait_for("llmgw is installed and answers.", timeout=180)
        shots.joinpath("6-end.txt").write_text(end)
        key = re.search(r"API key\s+(\S+)", end).group(1)
        api = re.search(r"client API\s+(\S+)", end).group(1)
        assert re.search(r"password\s+\S{12,}", end)
        assert "llmgw server init --install" in end
        assert re.search(r"knowledge bases\s+in the SQLite store", end), "where knowledge bases live is said"
        assert (root / "usr/local/bin/llmgw").read_bytes() == pyz.read_bytes()

        answer = openai.OpenAI(base_url=api, api_key=key).chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
        assert answer.choices[0].message.content

        term.keys("q")
        assert term.wait_until_exit() == 0
        # Left on the terminal once the screens close: where the portal is, and no secret.
        after = term.screen(scrollback=True)
        assert f"llmgw is installed. Portal: {api.removesuffix('v1')}" in after
        assert key not in after
    finally:
        term.close()


def _setup_terminal(root: Path, ports: dict[str, int]) -> Terminal:
    argv = [sys.executable, "-m", "llmgw", "setup", "--root", str(root), *listen_flags(ports)]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    return Terminal(argv, env, str(ROOT), root.parent)


def focused(term: Terminal, row: str) -> list[str]:
    """What the screen shows in reverse video, once that begins with `row` (the cursor moves a moment after its
    key); a row of two lines (a part turned off says what is missing without it) is two items."""
    seen: list[list[str]] = [[]]

    def row_first() -> list[str] | None:
        seen[0] = term.highlighted()
        return seen[0] if seen[0] and seen[0][0].startswith(row) else None
    try:
        return wait_until(row_first, 30, f"{row!r} highlighted")
    except AssertionError as e:
        raise AssertionError(f"{e}; highlighted: {seen[0]!r}") from None


def test_the_parts_list_shows_which_row_has_the_focus_and_keeps_it_there_after_a_dialog(tmp_path):
    ports = {role: free_port() for role in ROLES}
    term = _setup_terminal(tmp_path / "root", ports)
    try:
        term.wait_for("Is this one machine, or three")
        assert focused(term, "(X) One machine") == ["(X) One machine: this one runs everything"]
        term.keys("n")
        term.wait_for("the parts of an install")
        # Down to the starter (control, store, mirror, node, starter): drawn in reverse, the whole row.
        term.keys("Down", "Down", "Down", "Down")
        assert focused(term, "[x] Starter model") == [
            "[x] Starter model               on: qwen2.5-0.5b  a model that answers as soon as setup ends"]
        # A row written dim (a part setup does not place) is highlighted too.
        term.keys("Down")
        assert len(focused(term, "[-] Pictures and 3D")) == 1
        term.keys("Up")
        focused(term, "[x] Starter model")

        term.keys("Enter")
        term.wait_for("Simulated model (no internet, no weights)")
        focused(term, "( ) Simulated model")  # in the dialog: its first choice
        term.keys("Escape")
        term.wait_gone("Simulated model (no internet, no weights)")
        focused(term, "[x] Starter model")

        # To the checks and back: still on the starter, not at the top.
        term.keys("n")
        term.wait_for("checks", "b: back")
        term.keys("b")
        term.wait_for("the parts of an install")
        assert len(focused(term, "[x] Starter model")) == 1
        term.keys("q")
        assert term.wait_until_exit() == 0
    finally:
        term.close()


def test_a_directory_install_starts_with_the_firewall_off_and_the_refusal_opens_a_dialog_that_turns_it_off(
        tmp_path):
    root = tmp_path / "root"
    ports = {role: free_port() for role in ROLES}
    term = _setup_terminal(root, ports)
    shots = captures_dir()
    try:
        term.wait_for("Is this one machine, or three")
        term.keys("n")
        assert "[ ] Firewall                    off" in term.wait_for("the parts of an install")
        # Turned on anyway (control, store, mirror, node, starter, media, judge, firewall), then back up to the
        # starter, so that it is the refusal that brings the focus to the firewall.
        term.keys(*["Down"] * 7, "Space")
        term.wait_for("[x] Firewall")
        term.keys("Up", "Up", "Up")
        focused(term, "[x] Starter model")
        term.keys("n")
        refused = term.wait_for("This cannot go together")
        assert "turn the firewall off." in refused
        shots.joinpath("2b-refused.txt").write_text(refused)
        term.keys("Escape")
        dialog = term.wait_for("Rules written with nftables", "[X] Install firewall")
        shots.joinpath("2c-firewall.txt").write_text(dialog)
        # Kept on, it is refused where it is set, with the same sentence.
        term.keys("Escape")
        term.wait_for("Rules written with nftables", "turn the firewall off.")
        # The switch has the focus: Space turns it off, Esc keeps that.
        focused(term, "[X] Install firewall")
        term.keys("Space")
        term.wait_for("[ ] Install firewall")
        term.keys("Escape")
        term.wait_gone("Rules written with nftables")
        assert focused(term, "[ ] Firewall                    off")[1].startswith("without it: the agent")
        term.keys("n")
        term.wait_for("Every check passed.")
        term.keys("n")
        planned = term.wait_for("The same install from a script:")
        assert " - Firewall: left out" in planned and "--no-firewall" in planned
        term.keys("q")
        assert term.wait_until_exit() == 0
        assert not root.exists()
    finally:
        term.close()


def test_notifications_take_a_webhook_in_their_dialog_and_the_plan_and_command_say_where_events_go(tmp_path):
    root = tmp_path / "root"
    ports = {role: free_port() for role in ROLES}
    term = _setup_terminal(root, ports)
    try:
        term.wait_for("Is this one machine, or three")
        term.keys("n")
        assert "[ ] Notifications" in term.wait_for("the parts of an install")
        # Down to notifications (control, store, mirror, node, starter, media, judge, firewall, notify).
        term.keys(*["Down"] * 8, "Enter")
        term.wait_for("Webhook's address:", "[ ] Install notifications")
        term.type("http://127.0.0.1:9/hook")
        term.keys("Down", "Down", "Space", "Down", "Down", "Space")  # Slack; the switch
        term.wait_for("(X) A message for Slack", "[X] Install notifications")
        term.keys("Escape")
        # Loopback, not said to be meant: refused where it is set, with the box that says it is.
        term.wait_for("127.0.0.1 is this machine (loopback); if the webhook is meant to be there")
        term.keys("Up", "Space", "Escape")
        term.wait_gone("Webhook's address:")
        focused(term, "[x] Notifications")
        term.keys("n")
        term.wait_for("Every check passed.")
        term.keys("n")
        planned = term.wait_for("The same install from a script:")
        assert " + Notifications: every event sent to http://127.0.0.1:9/hook as Slack messages." in planned
        assert "--webhook http://127.0.0.1:9/hook --webhook-format slack --webhook-allow-private" in planned.replace(
            "\n", " ")
        term.keys("q")
        assert term.wait_until_exit() == 0
    finally:
        term.close()


def test_the_setup_screens_run_again_over_an_install_change_nothing_and_make_no_secret(install_root):
    root, ports = install_root
    assert install(root, ports).returncode == 0
    argv = [sys.executable, "-m", "llmgw", "setup", "--root", str(root), "--services", "supervised",
            *listen_flags(ports)]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    term = Terminal(argv, env, str(ROOT), root.parent)
    try:
        term.wait_for("Is this one machine, or three")
        term.keys("n")
        term.wait_for("the parts of an install")
        # The starter as the first install had it (sim), the firewall off.
        term.keys("Down", "Down", "Down", "Down", "Enter")
        term.wait_for("Simulated model (no internet, no weights)")
        term.keys("Space")
        term.wait_for("(X) Simulated model")
        term.keys("Escape")
        term.wait_for("on: sim")
        assert "[ ] Firewall" in term.screen()
        term.keys("n")
        assert "llmgw is installed here already; its server holds its ports" in term.wait_for("Every check passed.")
        term.keys("n")
        term.wait_for("The same install from a script:")
        term.keys("i")
        end = term.wait_for("llmgw was installed here already; nothing changed.", timeout=180)
        assert "set before; a new one: llmgw people reset-password admin@localhost" in end
        assert "API key" not in end
        term.keys("q")
        assert term.wait_until_exit() == 0
    finally:
        term.close()


def install(root: Path, ports: dict[str, int], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(root),
                           "--services", "supervised", "--starter", "sim", "--no-firewall", *listen_flags(ports),
                           *flags], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_server_init_install_serves_the_starter_and_run_again_changes_nothing(install_root):
    root, ports = install_root
    first = install(root, ports, "--json", "--language", "tr", "--max-key-ttl", "90d")
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    assert done["model"] == "sim" and done["answer"] and done["password"] and done["api_key"]
    assert set(done["steps"].values()) == {"done"}
    assert done["password"] not in first.stderr
    # The settings chosen are the cluster's first settings.
    admin = AdminClient(f"127.0.0.1:{ports['admin']}", done["admin_token_file"])
    assert admin.call("GET", "/api/v1/config", query={"path": "portal.language"})["value"] == "tr"
    assert admin.call("GET", "/api/v1/config", query={"path": "auth.max_key_ttl"})["value"] == "90d"

    again = install(root, ports, "--json")
    assert again.returncode == 0, again.stderr
    redone = json.loads(again.stdout)
    assert set(redone["steps"].values()) == {"unchanged"}
    assert redone["password"] is None and redone["api_key"] is None


def test_server_init_install_with_the_mirror_runs_it_and_tells_the_cluster_and_run_again_changes_nothing(
        install_root):
    root, ports = install_root
    mirror_port = free_port()
    first = install(root, ports, "--json", "--mirror", "--mirror-dir", "/srv/models",
                    "--mirror-listen", f"127.0.0.1:{mirror_port}")
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    assert done["steps"]["mirror"] == "done"
    url = f"https://127.0.0.1:{mirror_port}"
    written = (root / "etc/llmgw/mirror.yaml").read_text()
    assert f"dir: {root}/srv/models\n" in written and f"listen: 127.0.0.1:{mirror_port}\n" in written
    assert (root / "srv/models").is_dir()
    # The cluster's settings name it: the control planes tell the nodes to fetch from it.
    admin = AdminClient(f"127.0.0.1:{ports['admin']}", done["admin_token_file"])
    settings = admin.call("GET", "/api/v1/config", query={"path": "mirror"})["value"]
    assert (settings["url"], settings["peers"]) == (url, [])
    assert service_manager(Layout(root), "supervised").status("llmgw-mirror.service").active

    again = install(root, ports, "--json", "--mirror", "--mirror-dir", "/srv/models",
                    "--mirror-listen", f"127.0.0.1:{mirror_port}")
    assert again.returncode == 0, again.stderr
    assert set(json.loads(again.stdout)["steps"].values()) == {"unchanged"}


def test_an_unknown_starter_is_refused_in_one_sentence_before_anything_is_installed(tmp_path):
    root = tmp_path / "root"
    done = subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(root),
                           "--starter", "llama-9000"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.startswith('llmgw: "llama-9000" is not a starter model; choose one of the list')
    assert "Traceback" not in done.stderr
    assert not root.exists()


def test_quitting_the_setup_screens_installs_nothing_and_says_so(tmp_path):
    root = tmp_path / "root"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    term = Terminal([sys.executable, "-m", "llmgw", "setup", "--root", str(root)], env, str(ROOT), tmp_path)
    try:
        term.wait_for("Is this one machine, or three")
        term.keys("n")
        term.wait_for("the parts of an install")
        term.keys("q")
        assert term.wait_until_exit() == 0
        assert "Nothing was installed." in term.screen(scrollback=True)
        assert not root.exists()
    finally:
        term.close()


def test_the_setup_screens_without_a_terminal_point_to_the_command_for_scripts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "llmgw", "setup", "--root", str(tmp_path / "root")],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr == ("llmgw: the setup screens need a terminal; from a script, run `llmgw server init "
                           "--install` with the parts as flags (llmgw server init --help).\n")


def test_run_from_llmgw_pyz_the_install_puts_that_very_file_in_place_and_serves_from_it(install_root, pyz):
    root, ports = install_root
    done = subprocess.run([sys.executable, str(pyz), "server", "init", "--install", "--root", str(root),
                           "--services", "supervised", "--starter", "sim", "--no-firewall", *listen_flags(ports),
                           "--json"], capture_output=True, text=True, timeout=600, cwd=root.parent,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"]
    assert (root / "usr/local/bin/llmgw").read_bytes() == pyz.read_bytes()


def test_the_setup_screens_for_three_machines_log_in_to_the_other_two_and_a_judges_machine_and_show_the_command(
        install_root, pyz, tmp_path):
    root, ports = install_root
    # 127.0.0.2 and 127.0.0.3 stand for the other two machines, 127.0.0.4 for one for the judges alone: one sshd
    # listens on all three.
    sshd = Sshd(tmp_path, addresses=("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")).start()
    argv = [sys.executable, str(pyz), "setup", "--root", str(root), "--services", "supervised",
            *listen_flags(ports)]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    term = Terminal(argv, env, str(tmp_path), tmp_path)
    try:
        term.wait_for("Is this one machine, or three")
        term.keys("Down", "Space")
        term.wait_for("(X) Three machines")
        term.keys("n")
        # The firewall off, since an install into a directory cannot write this machine's rules.
        term.wait_for("Control plane on all three", "[ ] Firewall")
        term.keys("n")
        term.wait_for("the other two machines")
        for address in ("127.0.0.2", "127.0.0.3"):
            # Address, then down past the user and the three ways to log in to the key's file.
            term.type(f"{address}:{sshd.port}")
            term.keys(*["Down"] * 5)
            term.type(str(sshd.client_key))
            term.keys(*["Down"] * 3)
        # Past machine 3's sudo password: the first of the judges' machines, logged in to as machine 2 is.
        term.type(f"root@127.0.0.4:{sshd.port}")
        term.keys("F2")
        checks = term.wait_for("Every check passed.", timeout=120)
        for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            assert re.search(rf"root@{address}:{sshd.port}\s+reach\s+root@{address}:{sshd.port}; host key SHA256:",
                             checks), checks
        term.keys("n")
        planned = " ".join(term.wait_for("The same install from a script:").split())
        assert f"--judge-node root@127.0.0.4:{sshd.port}" in planned, planned
        assert (f"--ha root@127.0.0.2:{sshd.port},root@127.0.0.3:{sshd.port} --key {sshd.client_key}"
                in planned), planned
        term.keys("q")
        assert term.wait_until_exit() == 0
        assert "Nothing was installed." in term.screen(scrollback=True)
        assert not (root / "etc/llmgw/server.yaml").exists()
    finally:
        term.close()
        sshd.stop()
