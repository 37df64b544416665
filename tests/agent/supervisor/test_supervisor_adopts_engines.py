"""An agent restarted adopts the engines still running instead of starting them again; it kills nothing not its own."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys

import aiohttp
import psutil
from supervised import alive, script_spec, sim_spec, wait_for_file

from llmgw.agent.supervisor import Supervisor, procs, records
from llmgw.agent.supervisor.records import ShardRecord

# An agent as far as engines go: starts one, says its PID once it is ready, and waits to be killed.
AGENT = """
import asyncio, json, sys
from llmgw.agent.supervisor import EngineSpec, Supervisor

async def main():
    sup = Supervisor(sys.argv[1], user=None)
    shard = await sup.start(EngineSpec(**json.loads(sys.argv[2])))
    while (status := await sup.changes.get()).state not in ("ready", "failed"):
        pass
    print(status.state, shard.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def engines_on(port: int) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if str(port) in (p.info["cmdline"] or [])]


async def models_at(url: str) -> list[str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/v1/models") as r:
            return [m["id"] for m in (await r.json())["data"]]


async def test_a_sigkilled_agents_engine_is_adopted_and_the_same_pid_keeps_serving(data_dir, reap):
    spec = sim_spec("s1", model="tiny")
    agent = await asyncio.create_subprocess_exec(sys.executable, "-c", AGENT, str(data_dir),
                                                 json.dumps(dataclasses.asdict(spec)),
                                                 stdout=asyncio.subprocess.PIPE)
    reap.append(agent.pid)
    said = (await asyncio.wait_for(agent.stdout.readline(), timeout=30)).decode().split()
    assert said[0] == "ready", said
    pid = int(said[1])
    reap.append(pid)
    agent.send_signal(signal.SIGKILL)
    await agent.wait()

    sup = Supervisor(data_dir, user=None)
    try:
        adopted = await sup.adopt()
        assert [(s.shard_id, s.pid, s.adopted) for s in adopted] == [("s1", pid, True)]
        status = sup.get("s1").status()
        assert (status.state, status.pid, status.url, status.model) == ("ready", pid, spec.url, "tiny")
        assert await models_at(spec.url) == ["tiny"]
        assert engines_on(spec.port) == [pid]
        # What it wrote before the restart is still readable, from its output file.
        assert any("listening on" in line.text for line in sup.logs("s1"))
        # Started again by a control plane that retries: still the same process.
        assert (await sup.start(spec)).pid == pid
        assert engines_on(spec.port) == [pid]

        stopped = await sup.stop("s1", grace_s=5)
        assert stopped.state == "stopped"
        assert stopped.exit_code is None
        assert "not known" in stopped.message
        assert not alive(pid)
        assert await sup.adopt() == []
    finally:
        await sup.stop_all(grace_s=1)
        await sup.close()


async def test_a_supervisor_dropped_without_stopping_leaves_its_engine_to_the_next(data_dir):
    first = Supervisor(data_dir, user=None)
    spec = sim_spec("s1")
    shard = await first.start(spec)
    while (await first.changes.get()).state != "ready":
        pass
    await first.close()

    second = Supervisor(data_dir, user=None)
    try:
        adopted = await second.adopt()
        assert [s.pid for s in adopted] == [shard.pid]
        assert (await second.changes.get()).state == "ready"
        assert engines_on(spec.port) == [shard.pid]
    finally:
        await second.stop_all(grace_s=5)
        await second.close()
    assert not alive(shard.pid)


async def test_an_engine_that_ended_while_no_agent_watched_is_forgotten_and_its_stray_killed(data_dir, tmp_path, reap):
    """Its leader died with the agent away; a worker that left its group still holds memory."""
    marker = tmp_path / "stray.pid"
    worker = ("import os, signal, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
              "time.sleep(300)\n")
    spec = script_spec(tmp_path, "gone", f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {worker!r}], start_new_session=True)
        time.sleep(300)
    """)
    first = Supervisor(data_dir, user=None)
    shard = await first.start(spec)
    stray = int(await wait_for_file(marker))
    reap.append(stray)
    await first.close()
    os.kill(shard.pid, signal.SIGKILL)
    while alive(shard.pid):
        await asyncio.sleep(0.05)

    second = Supervisor(data_dir, user=None)
    try:
        assert await second.adopt() == []
        assert not alive(stray)
        assert not (records.shard_dir(data_dir, "gone") / records.RECORD).exists()
    finally:
        await second.close()


async def test_a_pid_given_to_another_process_is_neither_adopted_nor_killed(data_dir, reap):
    bystander = subprocess.Popen(["sleep", "120"])
    reap.append(bystander.pid)
    p = psutil.Process(bystander.pid)
    here = procs.ident(p)
    # The engine recorded ran under this PID before; the bystander started later and got it.
    records.write(data_dir, ShardRecord(
        shard_id="reused", pid=p.pid, pgid=p.pid, create_time=p.create_time() - 500, command=p.cmdline(),
        boot_start=here.start - 500, boot_id=procs.boot_id(), descendants=[(p.pid, here.start - 400)]))
    # And one with the right start time but another program: an engine's record is for its command.
    records.write(data_dir, ShardRecord(
        shard_id="other", pid=p.pid, pgid=p.pid, create_time=p.create_time(), command=["llama-server", "-m", "x"],
        boot_start=here.start, boot_id=procs.boot_id()))
    # And one from before the machine last started.
    records.write(data_dir, ShardRecord(
        shard_id="rebooted", pid=p.pid, pgid=p.pid, create_time=p.create_time(), command=p.cmdline(),
        boot_start=here.start, boot_id="another-boot"))
    (data_dir / "shards" / "junk").mkdir()
    (data_dir / "shards" / "junk" / records.RECORD).write_text("{not json")

    sup = Supervisor(data_dir, user=None)
    try:
        assert await sup.adopt() == []
        await asyncio.sleep(0.5)
        assert bystander.poll() is None
        assert (await sup.stop("reused", grace_s=1)).state == "stopped"
        assert bystander.poll() is None
        assert list((data_dir / "shards").glob("*/" + records.RECORD)) == []
    finally:
        await sup.close()
