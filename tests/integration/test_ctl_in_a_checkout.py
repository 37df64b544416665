"""`llmgw ctl` as a person runs it in a checkout: from any folder of it, and into a pipe that closes
early (issue 11, items 7 and 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.support.pgcluster import free_port
from tests.support.servers import llmgw

# Nothing from the machine or the developer's shell may point ctl elsewhere:
# the checkout must be what finds the token.
NOT_TOLD = {"LLMGW_TOKEN_FILE": "", "LLMGW_CONFIG": ""}


@pytest.fixture
def checkout(servers, tmp_path):
    """A checkout whose var/ holds a running server's data, as `python3 build.py run` leaves it."""
    s = servers("var")  # its data directory is tmp_path/var
    done = s.init()
    assert done.returncode == 0, done.stderr
    (tmp_path / "build.py").write_text("")
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    return s.start()


def test_ctl_run_from_a_subfolder_of_a_checkout_finds_its_server(checkout, tmp_path):
    deep = tmp_path / "docs" / "guides"
    done = llmgw("ctl", "status", "--json", cwd=str(deep), env={**NOT_TOLD, "LLMGW_ADMIN": checkout.admin})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "var"  # the checkout's server, named for its data directory


def test_ctl_in_a_checkout_whose_server_is_stopped_finds_the_token_and_says_the_server_is_not_running(
        servers, tmp_path):
    s = servers("var")
    assert s.init().returncode == 0
    deep = tmp_path / "docs"
    deep.mkdir()
    s.ports["admin"] = free_port()  # where nothing listens
    done = llmgw("ctl", "status", cwd=str(deep), env={**NOT_TOLD, "LLMGW_ADMIN": s.admin})
    assert done.returncode == 1
    # The token was found; what is missing is the server.
    assert done.stderr.startswith(f"llmgw: no llmgw server answers at {s.admin}; is it running?"), done.stderr


def test_an_explicit_token_file_wins_over_the_checkout(checkout, tmp_path):
    missing = tmp_path / "elsewhere" / "admin-token"
    done = llmgw("ctl", "status", "--token-file", str(missing), cwd=str(tmp_path / "docs"),
                 env={**NOT_TOLD, "LLMGW_ADMIN": checkout.admin})
    assert done.returncode == 1
    assert f"there is no admin token at {missing}" in done.stderr


def _many_audit_rows(server, n: int) -> None:
    """n changes through the admin API, each an audit row: many, quickly, without a ctl process each."""
    token = open(server.token_file).read().strip()
    for i in range(n):
        request = urllib.request.Request(
            f"http://{server.admin}/api/v1/config", method="POST",
            data=json.dumps({"set": {"auth.cache_ttl": f"{i % 9 + 1}s"}}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200


def test_ctl_audit_into_a_closed_pipe_ends_quietly(checkout, tmp_path):
    _many_audit_rows(checkout, 5)
    read, write = os.pipe()
    os.close(read)  # the reader has gone, as head has after its lines
    try:
        done = subprocess.run([sys.executable, "-m", "llmgw", "ctl", "audit", "--admin", checkout.admin,
                               "--token-file", checkout.token_file], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, cwd=str(tmp_path))
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # as a Unix tool ended by SIGPIPE


def test_ctl_audit_piped_into_head_prints_the_first_line_and_no_error(checkout, tmp_path):
    # More than a pipe holds (64 KiB on Linux), so that llmgw is still
    # writing when head has its line and goes, as with a real audit log.
    _many_audit_rows(checkout, 900)
    command = (f"{sys.executable} -m llmgw ctl audit --limit 1000 --admin {checkout.admin} "
               f"--token-file {checkout.token_file} | head -1")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0
    assert done.stdout.split() == ["WHEN", "WHO", "VIA", "ACTION", "TARGET", "CHANGE"]
    assert "Traceback" not in done.stderr and "bug" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.stderr == ""
