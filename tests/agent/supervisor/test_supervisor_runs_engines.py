"""Starting engines, reading their output, stopping them, and reporting how they ended."""

from __future__ import annotations

import asyncio
import os
import pwd

import aiohttp
import psutil
import pytest
from supervised import alive, next_state, script_spec, sim_spec, wait_for_file

from llmgw.agent.supervisor import EngineSpec, OutputLimits, Supervisor, records


async def test_a_started_engine_becomes_ready_and_a_repeated_start_starts_nothing(supervisor, data_dir):
    spec = sim_spec("s1", model="tiny")
    shard = await supervisor.start(spec)
    starting = await next_state(supervisor, "s1", "starting")
    assert starting.pid == shard.pid > 0

    ready = await next_state(supervisor, "s1", "ready")
    assert (ready.model, ready.url, ready.pid) == ("tiny", spec.url, shard.pid)
    async with aiohttp.ClientSession() as http:
        async with http.get(spec.url + "/v1/models") as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["tiny"]

    again = await supervisor.start(spec)
    assert again is shard
    engines = [p for p in psutil.process_iter(["cmdline"]) if str(spec.port) in (p.info["cmdline"] or [])]
    assert [p.pid for p in engines] == [shard.pid]

    # Its own process group and session: a signal to the agent's does not reach it.
    assert os.getpgid(shard.pid) == shard.pid != os.getpgrp()
    assert os.getsid(shard.pid) == shard.pid
    kept = (records.shard_dir(data_dir, "s1") / records.RECORD).read_text()
    assert f'"pid": {shard.pid}' in kept and '"model": "tiny"' in kept

    assert any("listening on" in line.text for line in supervisor.logs("s1"))


async def test_a_drained_engine_says_so_and_a_stopped_one_ends_with_its_exit_code(supervisor, data_dir):
    shard = await supervisor.start(sim_spec("s1"))
    await next_state(supervisor, "s1", "ready")

    drained = await supervisor.drain("s1")
    assert drained.state == "draining"
    assert (await next_state(supervisor, "s1", "draining")).pid == shard.pid

    stopped = await supervisor.stop("s1", grace_s=10, reason="scaled down")
    assert stopped.state == "stopped"
    assert stopped.exit_code is not None
    assert not alive(shard.pid)
    assert not (records.shard_dir(data_dir, "s1") / records.RECORD).exists()

    again = await supervisor.stop("s1")
    assert again.state == "stopped"
    assert (await supervisor.stop("never-started")).state == "stopped"


async def test_an_engines_output_is_readable_and_bounded_in_lines_bytes_and_file(data_dir, tmp_path):
    limits = OutputLimits(max_lines=50, max_bytes=4000, max_line_bytes=100, max_file_bytes=20_000)
    sup = Supervisor(data_dir, user=None, limits=limits)
    spec = script_spec(tmp_path, "chatty", """
        import sys, time
        for i in range(3000):
            print(f"line {i}")
        print("x" * 1000)
        print("to stderr", file=sys.stderr)
        sys.stdout.flush()
        time.sleep(1.5)
        print("after the file was emptied", flush=True)
        time.sleep(60)
    """)
    try:
        await sup.start(spec)
        for _ in range(100):
            if any(line.text == "after the file was emptied" for line in sup.logs("chatty", 1000)):
                break
            await asyncio.sleep(0.1)
        lines = sup.logs("chatty", 1000)
        texts = [line.text for line in lines]
        assert texts[-1] == "after the file was emptied"
        assert len(lines) <= 50
        assert sum(len(t.encode()) for t in texts) <= 4000
        cut = next(t for t in texts if t.startswith("x"))
        assert cut == "x" * 100 + " …[900 bytes cut]"
        assert "to stderr" in texts and "line 2999" in texts
        assert "line 0" not in texts
        assert [line.text for line in sup.logs("chatty", 2)] == texts[-2:]
        assert (records.shard_dir(data_dir, "chatty") / records.OUTPUT).stat().st_size < 20_000
    finally:
        await sup.stop_all(grace_s=2)
        await sup.close()


async def test_an_engine_that_dies_is_reported_failed_with_its_exit_code_and_last_lines(supervisor, data_dir, tmp_path):
    spec = script_spec(tmp_path, "oom", """
        import sys, time
        print("loading weights", flush=True)
        time.sleep(0.3)
        print("error: cudaMalloc failed: out of memory", file=sys.stderr, flush=True)
        sys.exit(3)
    """)
    await supervisor.start(spec)
    failed = await next_state(supervisor, "oom", "failed")
    assert failed.exit_code == 3
    assert "exited with code 3" in failed.message
    assert "loading weights" in failed.message
    assert "out of memory" in failed.message
    assert not (records.shard_dir(data_dir, "oom") / records.RECORD).exists()
    assert (await supervisor.get("oom").wait()) == 3


async def test_a_program_that_cannot_run_is_a_failed_shard_saying_why(supervisor):
    spec = EngineSpec(shard_id="missing", command=["/nonexistent/llama-server"], model="m", url="http://127.0.0.1:1")
    shard = await supervisor.start(spec)
    failed = await next_state(supervisor, "missing", "failed")
    assert "could not run /nonexistent/llama-server" in failed.message
    assert shard.pid == 0

    bad = await supervisor.start(EngineSpec(shard_id="../etc", command=["true"], model="m", url=""))
    assert bad.status().state == "failed"
    assert "cannot name a directory" in bad.status().message


async def test_stop_ends_the_group_and_a_worker_that_left_it_and_ignores_sigterm(supervisor, tmp_path):
    marker = tmp_path / "worker.pid"
    worker = ("import os, signal, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
              "while True: time.sleep(1)\n")
    spec = script_spec(tmp_path, "strata", f"""
        import subprocess, sys, time
        # The worker calls setsid: a session and group of its own, as Strata's does.
        subprocess.Popen([sys.executable, "-c", {worker!r}], start_new_session=True)
        # And one that stays in the group, ignoring SIGTERM too.
        subprocess.Popen([sys.executable, "-c",
                          "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(300)"])
        time.sleep(300)
    """)
    shard = await supervisor.start(spec)
    worker_pid = int(await wait_for_file(marker))
    assert os.getpgid(worker_pid) == worker_pid != shard.pid
    for _ in range(100):
        in_group = [p.pid for p in psutil.Process(shard.pid).children() if p.pid != worker_pid]
        if in_group:
            break
        await asyncio.sleep(0.05)

    stopped = await supervisor.stop("strata", grace_s=1)
    assert stopped.state == "stopped"
    assert stopped.exit_code == -15
    assert "SIGTERM" in stopped.message
    assert not alive(shard.pid)
    assert not alive(worker_pid)
    assert in_group and not any(alive(p) for p in in_group)


async def test_stop_finds_a_worker_whose_parent_died_by_the_mark_in_its_environment(supervisor, tmp_path):
    marker = tmp_path / "orphan.pid"
    spec = script_spec(tmp_path, "orphaning", f"""
        import os, signal, time
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                open({str(marker)!r}, "w").write(str(os.getpid()))
                while True:
                    time.sleep(1)
            os._exit(0)
        os.waitpid(child, 0)
        print("my worker left and its parent is gone", flush=True)
        time.sleep(300)
    """)
    shard = await supervisor.start(spec)
    orphan = int(await wait_for_file(marker))
    assert orphan not in [p.pid for p in psutil.Process(shard.pid).children(recursive=True)]

    await supervisor.stop("orphaning", grace_s=1)
    assert not alive(orphan)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run engines as another user")
async def test_an_agent_running_as_root_runs_engines_as_the_unprivileged_user(data_dir, monkeypatch):
    monkeypatch.setenv("LLMGW_JOIN_TOKEN", "not-for-engines")
    sup = Supervisor(data_dir, user="nobody", create_user=False)
    try:
        await sup.start(EngineSpec(shard_id="u", model="m", url="http://127.0.0.1:1", command=[
            "/bin/sh", "-c", "id -u; touch made-here && echo wrote in $PWD; echo token=$LLMGW_JOIN_TOKEN; "
                             "echo path=$PATH; exec sleep 60"]))
        for _ in range(50):
            texts = [line.text for line in sup.logs("u")]
            if len(texts) >= 4:
                break
            await asyncio.sleep(0.1)
        assert texts[0] == str(pwd.getpwnam("nobody").pw_uid)
        assert texts[1].startswith("wrote in ") and texts[1].endswith("/u/work")
        assert texts[2] == "token="
        assert texts[3] == f"path={os.environ['PATH']}"
    finally:
        await sup.stop_all(grace_s=2)
        await sup.close()


async def test_an_engine_user_that_cannot_be_had_is_refused_in_a_sentence():
    from llmgw.agent.supervisor import UserError, users

    with pytest.raises(UserError, match="does not exist; create it"):
        users.resolve("llmgw-no-such-user", is_root=True, create=False)
    me = users.resolve("llmgw-no-such-user", is_root=False)
    assert not me.switches and me.popen_args() == {}
