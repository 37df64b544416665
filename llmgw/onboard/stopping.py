"""`llmgw stop`: everything an install started on this machine, stopped, the model's engines included.

The agent's unit has KillMode=process: its engines run in process groups
and sessions of their own, so they outlive an agent that stops or restarts
and the next agent adopts them instead of loading the model again. Stopping
the units alone (a directory install's supervisors, or `systemctl stop`)
therefore left the engine running, holding its port, its memory and its
card. Here the agent is stopped first, so that nothing starts an engine
again; then its engines, found and stopped as the agent itself stops them
(the records it keeps under DATA/engines-run: the same checks that a pid is
still that engine, SIGTERM to its group and to whatever left the group,
SIGKILL after the grace); then the control plane and the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmgw.onboard import supervisor
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import ServiceManager

AGENT = "llmgw-agent.service"
# What an install may have started, in the order it is stopped: the agent (then its engines), the mirror,
# the control plane, the floating address that follows it (keepalived), and last the store the control plane
# wrote to (a three-machine install's Patroni, then the etcd Patroni keeps its leader in).
ORDER = (AGENT, "llmgw-mirror.service", "llmgw-server.service", "keepalived.service", "patroni.service",
         "etcd.service")
# Under systemd only llmgw's own units are stopped: PostgreSQL, etcd and keepalived there are Debian's
# services, which an administrator may run for more than llmgw.
SYSTEMD_UNITS = (AGENT, "llmgw-mirror.service", "llmgw-server.service")
# As long as the agent gives an engine to end on SIGTERM before it kills it (its unit's TimeoutStopSec).
ENGINE_GRACE_S = 30.0


@dataclass
class Stopped:
    what: str  # "llmgw-agent.service", or "engine SHARD"
    pid: int | None
    sentence: str


def units_started(layout: Layout, manager: ServiceManager) -> list[str]:
    """The units of this install that run now, in the order they are stopped."""
    if manager.kind == "supervised":
        # Each unit the install started has its supervisor's state file under RUN: that is the whole list.
        names = [p.name.removesuffix(".json") for p in layout.run.glob("*.json")] if layout.run.is_dir() else []
        running = [n for n in names if supervisor.supervisor_alive(supervisor.read_state(layout, n))]
    else:
        running = [n for n in SYSTEMD_UNITS if layout.unit_file(n).exists() and manager.status(n).active]
    return sorted(running, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def engines_dir(layout: Layout) -> Path:
    """Where the agent keeps its engines' records: DATA/engines-run, DATA as agent.yaml says."""
    from llmgw.config import ConfigError, load_agent_config

    data = layout.agent_data
    if layout.agent_config.exists():
        try:
            data = Path(load_agent_config(str(layout.agent_config)).data_dir)
        except ConfigError:
            pass  # an agent.yaml that does not load started no agent; its default place is still looked in
    return data / "engines-run"


async def _stop_engines(directory: Path, grace_s: float) -> list[Stopped]:
    # The agent's own supervisor, adopting what the agent left and stopping it: nothing here second-guesses
    # which processes are an engine's.
    from llmgw.agent import Supervisor

    engines = Supervisor(directory, user=None, create_user=False)
    try:
        adopted = await engines.adopt()
        await engines.stop_all(grace_s)
    finally:
        await engines.close()
    return [Stopped(f"engine {s.shard_id}", s.pid, f"stopped ({s.record.model or 'a model'})") for s in adopted]


def stop_install(layout: Layout, manager: ServiceManager, said: Callable[[Stopped], None] = lambda _s: None,
                 grace_s: float = ENGINE_GRACE_S) -> list[Stopped]:
    """Stop every unit of the install and the agent's engines; what was stopped, each told to `said` as it is."""
    done: list[Stopped] = []

    def tell(item: Stopped) -> None:
        done.append(item)
        said(item)

    units = units_started(layout, manager)
    for unit in units:
        pid = manager.status(unit).pid
        manager.stop(unit)
        tell(Stopped(unit, pid, "stopped"))
        if unit == AGENT:
            for engine in _engines(layout, grace_s):
                tell(engine)
    if AGENT not in units:
        # No agent ran (it ended, or was stopped by hand): the engines it left run all the same.
        for engine in _engines(layout, grace_s):
            tell(engine)
    return done


def _engines(layout: Layout, grace_s: float) -> list[Stopped]:
    directory = engines_dir(layout)
    if not (directory / "shards").is_dir():
        return []
    return asyncio.run(_stop_engines(directory, grace_s))
