"""`llmgw doctor` as a person runs it on a node: the real command, its words and its exit code."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import fakesmi

from llmgw.agent.discovery import bandwidth
from tests.support.pgcluster import free_port


def doctor(*args: str, path: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "llmgw", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def agent_yaml(tmp_path: Path, **keys) -> str:
    doc = {"cache_dir": str(tmp_path / "weights"), "data_dir": str(tmp_path / "state"),
           "discovery": {"dcgm_exporter": "off"}, **keys}
    path = tmp_path / "agent.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return str(path)


def clean_path(tmp_path: Path) -> str:
    """PATH without any nvidia-smi or engine a developer's machine may have, plus what the test puts in bin/."""
    return f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"


def test_a_healthy_node_says_what_it_has_and_exits_0(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        server = tmp_path / "bin" / "llama-server"
        server.parent.mkdir()
        server.write_text("#!/bin/sh\nexit 0\n")
        server.chmod(server.stat().st_mode | stat.S_IXUSR)
        config = agent_yaml(tmp_path, control_planes=[f"127.0.0.1:{listener.getsockname()[1]}"])
        r = doctor("--config", config, "--json", "--no-bandwidth", path=clean_path(tmp_path))
    finally:
        listener.close()
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["problems"] == []
    assert report["host"]["cpu_threads"] == os.cpu_count() and report["memory"]["total_mb"] > 0
    assert report["storage"][0]["path"] == str(tmp_path / "weights") and report["storage"][0]["free_bytes"] > 0
    assert report["engines"]["llamacpp"] == str(server) and report["engines"]["vllm"] == ""
    assert report["control_planes"][0]["reachable"] is True
    if not os.path.exists("/proc/driver/nvidia"):
        assert report["gpus"] == [] and report["host"]["gpu_note"] == ""


def test_problems_a_person_can_act_on_are_each_said_and_exit_1(tmp_path):
    (tmp_path / "a-file").write_text("")
    nobody = free_port()
    config = agent_yaml(tmp_path, cache_dir=str(tmp_path / "a-file" / "weights"),
                        control_planes=[f"127.0.0.1:{nobody}"])
    r = doctor("--config", config, "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 problems:" in r.stdout
    assert f"cache_dir {tmp_path / 'a-file' / 'weights'}: {tmp_path / 'a-file'} is not a directory" in r.stdout
    assert f"control plane 127.0.0.1:{nobody} can't be reached: Connection refused" in r.stdout
    assert "Traceback" not in r.stderr


def test_an_agent_yaml_that_cannot_be_used_is_named_with_its_key(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("discovery:\n  skip_gpu: true\n")
    r = doctor("--config", str(path), "--json", "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 1
    problems = json.loads(r.stdout)["problems"]
    # One problem: the defaults' directories and control planes are not the node's to check.
    assert len(problems) == 1 and "agent.yaml can't be used" in problems[0], problems
    assert "skip_gpu" in problems[0] and "did you mean" in problems[0]


def test_gpus_skipped_in_agent_yaml_are_a_note_not_a_problem(tmp_path):
    fakesmi.install(tmp_path / "bin", fakesmi.TWO_CARDS)
    config = agent_yaml(tmp_path, discovery={"skip_gpus": True, "dcgm_exporter": "off"})
    r = doctor("--config", config, "--json", "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["gpus"] == [] and any("skip_gpus" in n for n in report["notes"])


def test_gpus_behind_nvidia_smi_are_listed_and_a_card_in_the_wrong_slot_is_a_problem(tmp_path):
    if os.path.exists("/proc/driver/nvidia"):
        return  # NVML answers on such a machine, not the script below
    fakesmi.install(tmp_path / "bin", fakesmi.TWO_CARDS)
    r = doctor("--config", agent_yaml(tmp_path), "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "GPUs, read through nvidia-smi: driver 550.54.15, CUDA 12.4" in r.stdout
    assert "NVIDIA L40S" in r.stdout and "Gen4 x8 of x16" in r.stdout
    assert "GPU 1 (NVIDIA L40S) is linked at x8 of its x16 lanes: 15.8 GB/s where it could have 31.5" in r.stdout


def test_a_broken_driver_is_why_there_are_no_gpus(tmp_path):
    if os.path.exists("/proc/driver/nvidia"):
        return
    fakesmi.install(tmp_path / "bin", {f"--query-gpu={c} {fakesmi.CSV}": fakesmi.DRIVER_GONE
                                       for c in (fakesmi.CARDS, fakesmi.CARDS_OLD)})
    r = doctor("--config", agent_yaml(tmp_path), "--json", "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["gpus"] == [] and "couldn't communicate with the NVIDIA driver" in report["host"]["gpu_note"]
    assert report["host"]["gpu_note"] in report["problems"]


def test_memory_bandwidth_is_measured_on_the_spot(tmp_path):
    r = doctor("--config", agent_yaml(tmp_path), path=clean_path(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(out for out in r.stdout.splitlines() if out.startswith("memory reads:"))
    cache = bandwidth.last_cache_bytes()
    if bandwidth.buffer_size(cache, bandwidth.mem_available()) > 0:
        assert line.endswith(" GB/s") and float(line.split()[2]) > 0.5
    else:
        # A machine whose last cache is too large to read past (a VM reporting its host's, 3D V-Cache) or
        # without the memory for the read: the line says which, never a figure that is the cache's.
        if 8 * cache > bandwidth.MOST:
            assert line == f"memory reads: not measured: {bandwidth.why_not(cache, 0)}"
        else:
            assert line.startswith("memory reads: not measured: too little free memory (")


def test_doctor_run_in_a_subfolder_of_a_checkout_reads_its_var_node_agent_yaml(tmp_path):
    # As `python3 build.py run` leaves a checkout: the node's agent.yaml in var/node.
    node = tmp_path / "var" / "node"
    node.mkdir(parents=True)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        config = agent_yaml(node, control_planes=[f"127.0.0.1:{port}"])
        deep = tmp_path / "docs" / "guides"
        deep.mkdir(parents=True)
        r = subprocess.run([sys.executable, "-m", "llmgw", "doctor", "--no-bandwidth"], capture_output=True,
                           text=True, timeout=120, cwd=str(deep), env={**os.environ, "PATH": clean_path(tmp_path)})
    finally:
        listener.close()
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == f"config:       {config} (this checkout's, found walking up from here)"
    assert "/etc/llmgw/agent.yaml" not in r.stdout
    assert f"127.0.0.1:{port}  yes" in r.stdout


def test_llama_cpp_not_on_path_is_said_to_be_installed_by_the_agent_and_is_no_problem(tmp_path):
    r = doctor("--config", agent_yaml(tmp_path), "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("llamacpp"))
    assert "not installed yet: the agent installs it when a model first needs it" in row, row
    assert str(tmp_path / "state" / "engines") in row and "not on PATH" not in row
    assert "no problems found" in r.stdout


def test_a_llama_server_that_does_not_run_is_a_problem(tmp_path):
    broken = tmp_path / "bin" / "llama-server"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libcuda.so.1' >&2\nexit 127\n")
    broken.chmod(0o755)
    r = doctor("--config", agent_yaml(tmp_path), "--no-bandwidth", path=clean_path(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"llama-server at {broken} does not run: error while loading shared libraries: libcuda.so.1"
            in r.stdout)


def test_doctor_prints_each_check_as_it_is_done(tmp_path):
    # A llama-server whose --version waits for the test: while it waits, the
    # checks done before it must already be on the screen.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    server = tmp_path / "bin" / "llama-server"
    server.parent.mkdir()
    server.write_text(f"#!/bin/sh\ncat {gate}\n")
    server.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "llmgw", "doctor", "--config", agent_yaml(tmp_path),
                             "--no-bandwidth"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": clean_path(tmp_path)})
    try:
        seen = []
        while not seen or not seen[-1].startswith("GPUs"):
            line = proc.stdout.readline()
            assert line, f"doctor ended before its checks were done: {seen} {proc.stderr.read()}"
            seen.append(line)
        assert seen[0].startswith("config:") and any(line.startswith("memory:") for line in seen)
        assert proc.poll() is None  # still waiting on llama-server: what came was printed as it went
        with open(gate, "w") as g:
            g.write("version: 6123 (a1b2c3d)\nbuilt with cc\n")
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest + err
    assert f"{server} (b6123 (a1b2c3d))" in rest
