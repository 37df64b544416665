"""`llmgw agent`: a node's parts put together and connected to the cluster.

Order matters at start: the engines still running from before are adopted
first (so the Register the leader gets says what runs, and nothing is
started twice), then discovery, then the link to the leader. At stop the
engines are left running: an agent restarted for an upgrade must not take
the models down with it. `llmgw agent --stop-engines` is for taking a node
out of service.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable

from llmgw import __version__, stopsignals
from llmgw import engines as engine_registry
from llmgw.agent.discovery import Discovery
from llmgw.agent.link import ClusterLink
from llmgw.agent.nodelock import NodeLock
from llmgw.agent.ownlog import OwnLog
from llmgw.agent.plugins import load_agent_plugins
from llmgw.agent.shards import ShardRunner
from llmgw.agent.statefile import WRITE_EVERY, AgentState, WarningsFile, write_state
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.weights import Fetcher, Weights
from llmgw.config import AgentConfig
from llmgw.engines import (
    SGLANG,
    VLLM,
    VLLM_CPU,
    EngineUnavailable,
    LlamaServerUnavailable,
    PythonEngine,
    ensure_engine_env,
    ensure_llama_server,
    env_python,
    installed_env,
    wheels_dir,
)
from llmgw.protocol import GPU, Heartbeat, Host, Storage, Upgrade
from llmgw.release import ReleaseError, confirm, fetch_wheels, held_wheels, upgrade_self
from llmgw.telemetry import Tracing
from llmgw.trust import client_ssl_context, node_identity

log = logging.getLogger("llmgw.agent")


class NodeHardware:
    """ClusterLink's Hardware: discovery, with the supervisor's engines told apart from others' processes."""

    def __init__(self, discovery: Discovery, supervisor: Supervisor) -> None:
        self.discovery, self.supervisor = discovery, supervisor
        self.last: Heartbeat | None = None  # the last sample, for agent-state.json (never sampled twice)

    def describe(self) -> tuple[Host, list[GPU], list[Storage]]:
        return self.discovery.register_parts()

    def sample(self) -> Heartbeat:
        pids = [s.pid for s in (self.supervisor.get(st.shard_id) for st in self.supervisor.statuses()) if s and s.pid]
        self.last = self.discovery.sample(pids)
        return self.last


def reach_address(control_planes: list[str]) -> str:
    """The address this machine reaches its first control plane from: where its engines are reached back."""
    for address in control_planes:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((host, int(port or 7443)))  # UDP: nothing is sent, the route is looked up
                return s.getsockname()[0]
        except (OSError, ValueError):
            continue
    return "127.0.0.1"


def installed_engines(cfg: AgentConfig) -> dict[str, str]:
    """Each engine this node can run, with its version. llama.cpp, vLLM and SGLang count: the agent installs them on
    first use."""
    found: dict[str, str] = {}
    has_nvidia = os.path.exists("/dev/nvidiactl")
    for name in engine_registry.names():
        if name in cfg.engines.disabled:
            continue
        if name == "llamacpp":
            found[name] = engine_registry.installed(name, cfg.engines.llamacpp.binary or None) or "installed on use"
            continue
        if name in PYTHON_ENGINES and not getattr(cfg.engines, name).binary:
            # The agent installs the pinned release on first use (engineenv.py); SGLang has no CPU build, so a
            # node without NVIDIA cards does not offer it.
            if name == "vllm" or has_nvidia:
                found[name] = _env_version(cfg, name) or "installed on use"
            continue
        try:
            version = engine_registry.installed(name, _named(cfg, name))
        except Exception:  # noqa: BLE001 - a broken install is an engine this node does not have
            version = None
        if version:
            found[name] = version
    return found


PYTHON_ENGINES = ("vllm", "sglang")


def _release(engine: str, gpus: bool) -> PythonEngine:
    """The pinned release a shard of `engine` gets: vLLM's CPU build for a shard without cards."""
    if engine == "sglang":
        return SGLANG
    return VLLM if gpus else VLLM_CPU


def _env_version(cfg: AgentConfig, engine: str) -> str | None:
    """The version of what the agent installed for `engine` already, either build; None when nothing is yet."""
    for spec in (_release(engine, True), _release(engine, False)):
        if installed_env(cfg.data_dir, spec) is not None:
            return f"{spec.name} {spec.version}"
    return None


def _named(cfg: AgentConfig, engine: str):
    """Where agent.yaml says an engine is, for those it can name (other than llama.cpp's); None otherwise."""
    if engine == "strata":
        # A Strata installed by hand: its interpreter, source and engine (engines.strata).
        return cfg.engines.strata.located()
    if engine == "comfyui":
        return cfg.engines.comfyui.dir or None  # its main.py's directory; the adapter finds its environment
    if engine in PYTHON_ENGINES:
        return getattr(cfg.engines, engine).binary or None
    return None


class Agent:
    def __init__(self, cfg: AgentConfig, *, measure_bandwidth: bool = True,
                 fetchers: list[Fetcher] | None = None) -> None:
        self.cfg = cfg
        identity = node_identity(cfg.data_dir)  # TrustError with what to do when not joined
        self.node_id = identity.node_id
        # Before anything reads or starts engines: a second agent on this
        # identity would adopt the running one's engines (AgentAlreadyRunning).
        self.lock = NodeLock(cfg.data_dir)
        self.lock.take(f"{cfg.node_name}, {self.node_id}")
        self.ssl = client_ssl_context(cfg.data_dir)
        self.advertise = cfg.advertise or reach_address(cfg.control_planes)
        self.listen = cfg.engines.listen or self.advertise
        self.own_log = OwnLog()
        self.discovery = Discovery(cfg.discovery, [cfg.cache_dir, cfg.data_dir], measure_bandwidth=measure_bandwidth)
        user = cfg.engines.user or None
        self.supervisor = Supervisor(os.path.join(cfg.data_dir, "engines-run"), user=user,
                                     on_status=self._on_status)
        self.weights = Weights(cfg.cache_dir, hf_endpoint=cfg.weights.hf_endpoint,
                               hf_token_file=cfg.weights.hf_token_file, mirror_url=cfg.weights.mirror,
                               mirror_ssl=self.ssl, fetchers=fetchers)
        # The node's traces of its starts (agent.yaml telemetry), made in run() and sent before it returns.
        self.tracing = Tracing("llmgw-agent", cfg.node_name, __version__)
        self.runner = ShardRunner(supervisor=self.supervisor, weights=self.weights, engine=engine_registry.engine,
                                  binary=self._binary, engines=installed_engines(cfg), host=self.listen,
                                  advertise=self.advertise, disabled=tuple(cfg.engines.disabled),
                                  own_log=self.own_log.lines,
                                  key_dir=os.path.join(cfg.data_dir, "engines-run"), engine_user=user,
                                  tracing=self.tracing)
        self.hardware = NodeHardware(self.discovery, self.supervisor)
        self.link = ClusterLink(node_id=self.node_id, name=cfg.node_name, control_planes=list(cfg.control_planes),
                                ssl=self.ssl, hardware=self.hardware,
                                shards=self.runner, labels=dict(cfg.labels), advertise=self.advertise,
                                on_welcome=lambda _: confirm(cfg.data_dir, __version__),
                                on_upgrade=self._upgrade, cached=self.runner.kv)
        self._stop: asyncio.Event | None = None

    async def _upgrade(self, message: Upgrade) -> str | None:
        """Replace this node's program and stop, for the service manager to start the new one; None, or why not.

        The engines keep running (an agent stops without stopping them) and
        the new agent adopts them, so the node's models answer throughout."""
        if not self.link.leader:
            return "the node lost its control plane before it could fetch the program"
        try:
            if message.wheels:
                # Where the llama.cpp install takes them without a registry (engines/llamacpp_install.py).
                await fetch_wheels(self.link.leader, message.wheels, self.ssl, wheels_dir(self.cfg.data_dir))
            await upgrade_self(self.link.leader, message.version, message.sha256, self.ssl, self.cfg.data_dir,
                               message.confirm_within_s)
        except ReleaseError as e:
            return str(e)
        log.info("upgraded to %s; restarting into it", message.version)
        if self._stop is not None:
            self._stop.set()
        return None

    async def _engine_wheels(self) -> None:
        """The engine wheels the leader holds (an offline bundle's), fetched before llama.cpp's server is
        installed: a node that joined after the bundle's upgrade installs from them as the others did, not
        from a registry it may not reach. Without them (none held, the leader unreachable), the install
        goes on as it would have."""
        if not self.link.leader:
            return
        try:
            held = await held_wheels(self.link.leader, self.ssl)
            if held:
                await fetch_wheels(self.link.leader, held, self.ssl, wheels_dir(self.cfg.data_dir))
        except ReleaseError as e:
            log.info("no engine wheels from the control plane: %s", e)

    async def _on_status(self, status) -> None:
        await self.runner.on_status(status)

    async def _binary(self, engine: str, gpus: bool = True, installing: Callable[[str], None] | None = None):
        """The program a shard of `engine` runs; `gpus` says whether the shard has cards (vLLM's CPU build if not).

        `installing` is told, once, what is being installed when the engine must be first: minutes, which the
        shard's status says rather than "starting the engine"."""
        if engine in PYTHON_ENGINES and not getattr(self.cfg.engines, engine).binary:
            spec = _release(engine, gpus)
            if installing is not None and installed_env(self.cfg.data_dir, spec) is None:
                installing(f"installing the engine ({spec.requirement}); the first start on a node takes minutes")
            await self._engine_wheels()
            try:
                env = await ensure_engine_env(self.cfg.data_dir, spec, wheels=wheels_dir(self.cfg.data_dir),
                                              extra_index=getattr(self.cfg.engines, engine).extra_index(),
                                              progress=lambda line: log.info("%s: %s", spec.name, line))
            except EngineUnavailable as e:
                raise RuntimeError(f"{e}. Name the engine's program in agent.yaml (engines.{engine}.binary) and "
                                   "the agent installs nothing") from None
            return [env_python(env)]
        if engine == "llamacpp":
            await self._engine_wheels()
            try:
                server = await ensure_llama_server(self.cfg.data_dir, self.cfg.engines.llamacpp,
                                                   progress=lambda line: log.info("llama.cpp: %s", line))
            except LlamaServerUnavailable as e:
                raise RuntimeError(str(e)) from None
            return server.argv_prefix
        return _named(self.cfg, engine)

    async def run(self, stop: asyncio.Event, *, stop_engines: bool = False) -> None:
        self.own_log.attach()
        warnings = WarningsFile(self.cfg.data_dir)
        logging.getLogger().addHandler(warnings)
        self.tracing.apply(self.cfg.telemetry)
        try:
            await self._run(stop, stop_engines)
        finally:
            await asyncio.to_thread(self.tracing.shutdown)
            logging.getLogger().removeHandler(warnings)
            self.own_log.detach()

    async def _keep_state(self) -> None:
        """Rewrite agent-state.json every few seconds, for the node's overview (statefile.py)."""
        _, gpus, _ = await asyncio.to_thread(self.discovery.register_parts)
        state = AgentState(pid=os.getpid(), version=__version__, node=self.cfg.node_name, node_id=self.node_id,
                           started_at=time.time(), since=time.time(),
                           gpus=[{"index": g.index, "name": g.name, "memory_mb": g.memory_mb} for g in gpus])
        while True:
            if state.leader != self.link.leader:
                state.leader, state.since = self.link.leader, time.time()
            state.control_planes = list(self.link.known)
            state.shard_gpus = self.runner.cards()
            # Busy, memory and heat as of the last heartbeat: sampled once, for the leader and for this file.
            sensors = {g.index: g for g in (self.hardware.last.gpus if self.hardware.last else [])}
            for card in state.gpus:
                sensor = sensors.get(card["index"])
                if sensor is not None:
                    card.update(utilization_percent=sensor.utilization_percent,
                                memory_used_mb=sensor.memory_used_mb, temperature_c=sensor.temperature_c)
            try:
                await asyncio.to_thread(write_state, self.cfg.data_dir, state)
            except OSError as e:
                log.debug("agent-state.json not written: %s", e)
            await asyncio.sleep(WRITE_EVERY)

    async def _run(self, stop: asyncio.Event, stop_engines: bool) -> None:
        self._stop = stop
        adopted = await self.supervisor.adopt()
        if adopted:
            log.info("adopted %d engine(s) still running: %s", len(adopted),
                     ", ".join(f"{s.shard_id} (pid {s.pid})" for s in adopted))
        self.discovery.start()
        link = asyncio.create_task(self.link.run(), name="cluster-link")
        keeping = asyncio.create_task(self._keep_state(), name="agent-state")
        stopping = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({link, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if link in done:
                link.result()  # raises what ended it
        finally:
            link.cancel()
            stopping.cancel()
            keeping.cancel()
            await asyncio.gather(link, stopping, keeping, return_exceptions=True)
            if stop_engines:
                await self.supervisor.stop_all()
            await self.runner.kv.close()
            await self.supervisor.close()
            await self.weights.close()
            self.discovery.close()
            self.lock.release()


async def serve(cfg: AgentConfig, *, stop_engines: bool = False) -> None:
    _, fetchers = load_agent_plugins(cfg)  # before Agent: it lists the node's engines, plugins' included
    agent = Agent(cfg, fetchers=fetchers)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopsignals.take(loop, stop.set)
    print(f"llmgw agent {cfg.node_name} ({agent.node_id}): control planes "
          f"{', '.join(cfg.control_planes)}; engines reached at {agent.advertise}", flush=True)
    await agent.run(stop, stop_engines=stop_engines)
