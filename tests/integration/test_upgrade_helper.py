"""The upgrade helper's root half, `llmgw upgrade-apply` (what llmgw-upgrade.service runs when a control plane
that systemd runs as llmgw stages its next program): a control plane installed from llmgw.pyz into a root
moves to another build and keeps its previous one; a request that names a file outside the staged folder
is refused, moved aside with its reason, and replaces nothing.

systemd is not PID 1 here: the supervised manager restarts the control plane, as systemctl would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.onboard.layout import Layout
from llmgw.release.helper import FAILED, REQUEST, Request, stage
from llmgw.release.program import sha256_of
from tests.support.installs import end_install
from tests.support.pgcluster import free_port
from tests.support.pyz import pyz, with_version  # noqa: F401 - pyz is a fixture
from tests.support.servers import llmgw
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # an upgrade from llmgw.pyz

ROLES = ("client", "agent", "admin", "metrics")


@pytest.fixture
def control_plane(tmp_path, pyz):
    """A control plane installed from llmgw.pyz under a root, running supervised; ended after the test."""
    root = tmp_path / "root"
    ports = {role: free_port() for role in ROLES}
    listen = [arg for role in ROLES for arg in (f"--listen-{role}", f"127.0.0.1:{ports[role]}")]
    done = subprocess.run([sys.executable, str(pyz), "server", "init", "--install", "--root", str(root),
                           "--services", "supervised", "--no-node", "--no-model", "--no-firewall", *listen],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=bare_env())
    assert done.returncode == 0, done.stderr
    yield root, ports
    end_install(root, f"127.0.0.1:{ports['admin']}", root / "var/lib/llmgw/admin-token")


def bare_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def version(root: Path, ports: dict[str, int]) -> str:
    done = llmgw("ctl", "status", "--json", "--admin", f"127.0.0.1:{ports['admin']}", "--token-file",
                 str(root / "var/lib/llmgw/admin-token"))
    return json.loads(done.stdout)["version"] if done.returncode == 0 else ""


def apply(root: Path) -> subprocess.CompletedProcess:
    # As llmgw-upgrade.service runs it: the machine's own program, as root.
    return subprocess.run([sys.executable, str(Layout(root).program), "upgrade-apply", "--root", str(root)],
                          capture_output=True, text=True, timeout=120, env=bare_env())


def test_a_staged_program_is_put_in_place_kept_watched_and_the_control_plane_restarts_on_it(
        control_plane, pyz, tmp_path):
    root, ports = control_plane
    layout = Layout(root)
    before = version(root, ports)
    assert before
    newer = with_version(pyz, "0.9.1", tmp_path / "newer.pyz")
    releases = layout.server_data / "releases"
    releases.mkdir(parents=True, exist_ok=True)
    incoming = releases / ".incoming-0.9.1.pyz"
    shutil.copyfile(newer, incoming)
    # The control plane's half, as it stages when it may not replace its program.
    stage(releases, incoming, Request("0.9.1", sha256_of(newer), "llmgw-0.9.1.pyz", 60.0))

    done = apply(root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"llmgw 0.9.1 is in place of {layout.program} (the previous kept as "
                                  "llmgw.previous); llmgw-server.service restarted, watched by pid ")
    assert layout.program.read_bytes() == newer.read_bytes()
    assert layout.program.with_name("llmgw.previous").read_bytes() == pyz.read_bytes()
    assert not (releases / REQUEST).exists() and not (releases / "staged" / "llmgw-0.9.1.pyz").exists()
    wait_until(lambda: version(root, ports) == "0.9.1", 60, "the control plane answers as 0.9.1")
    watchdog_log = layout.server_data / "upgrade-watchdog.log"
    wait_until(lambda: "llmgw 0.9.1 confirmed it is up" in watchdog_log.read_text(), 60,
               "the watchdog saw the new program confirm")


def test_a_request_naming_a_file_outside_the_staged_folder_is_refused_and_moved_aside(control_plane):
    root, _ = control_plane
    layout = Layout(root)
    program = layout.program.read_bytes()
    releases = layout.server_data / "releases"
    (releases / "staged").mkdir(parents=True, exist_ok=True)
    (releases / REQUEST).write_text(json.dumps({"version": "6.6.6", "sha256": "0" * 64,
                                                "staged": "../../../../etc/passwd", "confirm_within": 60}))
    done = apply(root)
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: the upgrade request names '../../../../etc/passwd', which is not a file of "
                           f"{(releases / 'staged').resolve()}; nothing was replaced\n")
    assert layout.program.read_bytes() == program
    assert not (releases / REQUEST).exists()
    failed = json.loads((releases / FAILED).read_text())
    assert failed["staged"] == "../../../../etc/passwd" and "nothing was replaced" in failed["error"]
