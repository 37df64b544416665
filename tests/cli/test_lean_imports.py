"""`llmgw --help` and `llmgw ctl` import what a parser and an HTTP call need, not the server's libraries.

Building the parser imports every command's module; when one of them
imported its command's libraries at the top, every `llmgw --help` paid for
aiohttp (96 ms, through llmgw.release) and asyncssh (80 ms, through
llmgw.onboard.nodeadd), and `llmgw ctl status` with it (issue 26). Asserted
on the modules imported, as `python -X importtime` lists them, never on a
time: `python3 build.py bench cli` measures that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.pgcluster import free_port

# The server's, the installs', the console's and the store's: none is wanted to print help or call the admin API.
HEAVY = ("aiohttp", "asyncssh", "jinja2", "urwid", "cryptography", "yaml", "asyncio", "asyncpg", "aiosqlite",
         "orjson", "uvloop", "opentelemetry", "llmgw.config", "llmgw.store", "llmgw.account", "llmgw.release",
         "llmgw.protocol", "llmgw.onboard.nodeadd", "llmgw.onboard.ssh", "llmgw.control.adminapi",
         "llmgw.control.plane")


def imported(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "llmgw", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "LLMGW_CONFIG": os.devnull})
    names = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", done.stderr, re.M))
    return done, names


def heavy_in(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


def test_llmgw_help_imports_none_of_the_commands_libraries():
    done, names = imported("--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "llmgw.cli.main" in names and "llmgw.cli.upgrade" in names  # the list is read: it holds the parser's
    assert heavy_in(names) == []


@pytest.mark.parametrize("command", [["ctl", "--help"], ["server", "init", "--help"], ["keys", "list", "--help"]])
def test_a_commands_help_imports_none_of_them_either(command):
    done, names = imported(*command)
    assert done.returncode == 0, done.stderr[-2000:]
    assert heavy_in(names) == []


def test_ctl_status_calls_the_admin_api_with_urllib_alone(tmp_path):
    token = tmp_path / "admin-token"
    token.write_text("t" * 40)
    token.chmod(0o600)
    port = free_port()  # leased: nothing listens there, so the call is made and refused
    done, names = imported("ctl", "status", "--admin", f"127.0.0.1:{port}", "--token-file", str(token))
    assert done.returncode == 1
    assert f"no llmgw server answers at 127.0.0.1:{port}" in done.stderr
    assert "urllib.request" in names
    assert heavy_in(names) == []


def test_the_server_yaml_the_help_names_is_the_one_the_server_reads():
    # Written out in cli/server.py so that the parser needs no llmgw.config.
    from llmgw.cli import firewall, server
    from llmgw.config.server import SYSTEM_CONFIG

    assert server.SYSTEM_CONFIG == firewall.SYSTEM_CONFIG == SYSTEM_CONFIG
