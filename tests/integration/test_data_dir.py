"""server.yaml's data_dir is where this machine's files go: the SQLite store, the admin token, the
master key; `--data-dir` overrides it; `llmgw ctl` finds the token through it (issue 10, item 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.support.pgcluster import free_port
from tests.support.servers import llmgw
from tests.support.waiting import wait_for

SYSTEM_STORE = "/var/lib/llmgw/llmgw.db"


def test_server_init_with_only_data_dir_in_server_yaml_puts_the_store_there(tmp_path):
    data_dir = tmp_path / "elsewhere"
    config = tmp_path / "server.yaml"
    config.write_text(f"data_dir: {data_dir}\n")
    system_store_was_there = os.path.exists(SYSTEM_STORE)
    done = llmgw("server", "init", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["admin_token_file"] == str(data_dir / "admin-token")
    assert (data_dir / "llmgw.db").is_file()
    assert os.path.exists(SYSTEM_STORE) == system_store_was_there


def test_the_data_dir_flag_overrides_server_yaml(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(f"data_dir: {tmp_path / 'from-yaml'}\n")
    done = llmgw("server", "init", "--config", str(config), "--data-dir", str(tmp_path / "from-flag"), "--json")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-flag" / "llmgw.db").is_file()
    assert not (tmp_path / "from-yaml").exists()


def test_the_server_and_ctl_use_server_yamls_data_dir_without_being_told(tmp_path):
    data_dir = tmp_path / "elsewhere"
    config = tmp_path / "server.yaml"
    config.write_text(f"data_dir: {data_dir}\n")
    assert llmgw("server", "init", "--config", str(config)).returncode == 0
    ports = {role: free_port() for role in ("client", "agent", "admin", "metrics")}
    config.write_text(f"data_dir: {data_dir}\nlisten:\n" + "".join(
        f"  {role}: 127.0.0.1:{port}\n" for role, port in ports.items()))
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        env = {"LLMGW_CONFIG": str(config), "LLMGW_ADMIN": "", "LLMGW_TOKEN_FILE": ""}

        def status():
            done = llmgw("ctl", "status", "--json", env=env, cwd=str(tmp_path))
            return json.loads(done.stdout) if done.returncode == 0 else None

        got, _ = wait_for(status, timeout=30, interval=0.5)
        assert got is not None, (tmp_path / "server.log").read_text()
        assert got["store"]["address"] == f"sqlite:{data_dir / 'llmgw.db'}"
        assert (data_dir / "master-key").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()
