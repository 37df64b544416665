"""The cluster's own read-only MCP tools: what `llmgw ctl` says, for an agent to read.

`llmgw ctl mcp add llmgw --url llmgw:admin` registers the cluster itself as
an MCP server; the gateway answers its tools here, in the control plane's
process, with no address and no token to give. Each tool calls what the
admin API's route calls (the status, the catalog's nodes, models, replicas
and placement explanation, the node's logs asked over its agent's link), so
a tool and `ctl` can never disagree; only the words are this module's.

Every tool reads and none changes anything: each is declared `readOnlyHint`,
and none is handed anything that could write (the catalog's reads, the
store's reads, the agent's log rings). It is an administrator's view of the
cluster, so it is granted (`llmgw.*`) to the people who would have `ctl`.

A standby answers what is in the store (the catalog, the nodes as the
leader last recorded them from their heartbeats) and says so; a node's log
lines are asked of the node over its link to the leader, so a standby names
the leader instead, as the admin API does.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from llmgw.control import Refused, action_line, catalog_of, node_logs_of, status_of
from llmgw.errors import ExpectedError

if TYPE_CHECKING:
    from llmgw.control import ControlPlane

log = logging.getLogger("llmgw.mcp")

MAX_LOG_LINES = 500  # an agent's context is not a terminal: `ctl logs` allows 5,000
DEFAULT_LOG_LINES = 100
EXPLAINED_IN_STATUS = 10
# A shard's id as the placement makes it (r_ and 12 hex digits), or a test's; never a path.
SHARD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
A_SHARD = "a shard's id as list_replicas shows it (like r_0123456789ab)"

Arguments = dict[str, Any]  # a tool's arguments, JSON from the caller; _checked holds them to the tool's schema
# What the admin API's routes give, as their JSON (status_of, the catalog's nodes, models and replicas).
View = dict[str, Any]
Answer = tuple[str, dict[str, Any]]  # the text for people, the data for scripts


class BadArguments(Exception):
    """The arguments a tool was called with, refused with the sentence that says what to send."""


@dataclass(frozen=True)
class _Tool:
    name: str
    title: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    run: Callable[[ClusterTools, Arguments], Awaitable[Answer]]

    def descriptor(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": {"type": "object", "properties": self.properties, "required": list(self.required),
                            "additionalProperties": False},
            # Every one of them: nothing here writes, and the test of the tool list holds it.
            "annotations": {"title": self.title, "readOnlyHint": True, "destructiveHint": False,
                            "idempotentHint": True, "openWorldHint": False},
        }


class AnsweredBy(TypedDict):
    """Which control plane answered a tool, in every answer's data: a standby's figures are the store's."""

    control_plane: str
    role: Literal["leader", "standby"]
    leader: str | None


class ClusterTools:
    """The cluster's own read-only tools, answered in this control plane's process."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def tools(self) -> list[dict[str, Any]]:
        """The MCP tool descriptors, named without the gateway's "llmgw." prefix."""
        return descriptors()

    async def call(self, name: str, arguments: object) -> dict[str, Any]:
        """An MCP CallToolResult as a dict; a refusal is `isError` with a sentence, never an exception.
        `arguments` as the caller sent them: the tool's schema is held here (_checked)."""
        tool = _TOOLS.get(name)
        if tool is None:
            return _error(f'there is no cluster tool "{name}"; the tools are {_listed(_TOOLS)}')
        try:
            checked = _checked(tool, arguments)
            text, data = await tool.run(self, checked)
        except BadArguments as e:
            return _error(str(e))
        except (Refused, ExpectedError) as e:
            # The admin API's own refusals (a node or model there is not, a standby, a node not connected,
            # the store not answering): the same sentence `ctl` prints.
            return _error(str(e))
        except Exception as e:
            log.exception("the cluster tool %s failed", name)
            return _error(f"{name} failed inside the control plane {self.plane.name} ({type(e).__name__}); "
                          "its log has the detail")
        return {"content": [{"type": "text", "text": text}], "structuredContent": data, "isError": False}

    # --- who answers ---------------------------------------------------------------------------

    def _leader_name(self) -> str | None:
        lease = self.plane.lease.state.lease
        if lease is None or lease.expires_at < time.time():
            return None
        return lease.holder.rsplit("#", 1)[0]

    def _answered_by(self) -> AnsweredBy:
        leading = self.plane.lease.leading
        return {"control_plane": self.plane.name, "role": "leader" if leading else "standby",
                "leader": self.plane.name if leading else self._leader_name()}

    def _standby_note(self) -> list[str]:
        """On a standby, the first line of a store-read answer: where its figures come from."""
        if self.plane.lease.leading:
            return []
        leader = self._leader_name()
        by = f"the leader ({leader})" if leader else "the leader (none leads just now)"
        return [f"(answered by {self.plane.name}, a standby: from the store, as {by} last recorded the nodes "
                "from their heartbeats)"]

    # --- the tools ---------------------------------------------------------------------------------

    async def cluster_status(self, args: Arguments) -> Answer:
        status = await status_of(self.plane)
        catalog = catalog_of(self.plane)
        nodes = await catalog.nodes()
        models = await catalog.list_models()
        replicas = await catalog.replicas()
        # Each explanation is a placement pass over the whole catalog: the first few short models get their
        # reason here, any more are pointed at explain_placement.
        short = [m["name"] for m in models if m["replicas"]["ready"] < _wanted(m) and not m["parked"]]
        waiting = {name: await self._waits(name) for name in short[:EXPLAINED_IN_STATUS]}
        unhealthy = _unhealthy(status, nodes, models, replicas, waiting)
        gpus = _gpus(nodes)
        leader = status["leader"]
        store = status["store"]
        data = {
            "answered_by": self._answered_by(),
            "version": status["version"],
            "leader": leader,
            "store": store,
            "control_planes": status["control_planes"],
            "nodes": [{"name": n["name"], "id": n["id"], "state": n["state"], "version": n.get("version", ""),
                       "gpus": len(n["gpus"]), "replicas": n["replicas"], "seen_ago_s": n["seen_ago_s"]}
                      for n in nodes],
            "models": [{"name": m["name"], "state": m["state"], "ready": m["replicas"]["ready"],
                        "wanted": _wanted(m), "parked": m["parked"]} for m in models],
            "gpus": gpus,
            "unhealthy": unhealthy,
        }
        planes = ", ".join(f"{cp['name']}{' (leads)' if cp['leads'] else ''}" for cp in status["control_planes"])
        ready_nodes = sum(1 for n in nodes if n["state"] == "ready")
        lines = [*self._standby_note(), *_fields([
            ("control plane", f"{status['name']} ({status['role']}), llmgw {status['version']}"),
            ("leader", f"{leader['holder']} at {leader['address']} (epoch {leader['epoch']})" if leader else "none"),
            ("store", f"{store['address']} ({'up' if store['up'] else 'NOT ANSWERING'}, schema {store['schema']})"),
            ("control planes", planes or "-"),
            ("nodes", f"{len(nodes)}, {ready_nodes} ready" if nodes else "none yet (llmgw node add)"),
            ("models", "; ".join(f"{m['name']} {m['ready']}/{m['wanted']} ready ({m['state']})"
                                 for m in data["models"]) or "none in the catalog"),
            ("GPUs", _gpus_said(gpus)),
            ("unhealthy", "nothing" if not unhealthy else f"{len(unhealthy)}:"),
        ])]
        lines += [f"  - {u}" for u in unhealthy]
        return "\n".join(lines), data

    async def _waits(self, model: str) -> str:
        """Why a model short of its replicas waits, as its placement explanation says it ("" when it does not)."""
        explained = await catalog_of(self.plane).explain(model)
        return "; ".join(a["reason"] for a in explained["actions"] if a["action"] == "wait")

    async def list_nodes(self, args: Arguments) -> Answer:
        nodes = await catalog_of(self.plane).nodes()
        rows = [(n["name"], n["state"], _cards(n["gpus"]), _gpu_free(n["gpus"]), _load(n),
                 n.get("version") or "-", ",".join(f"{k} {v}" for k, v in sorted(n["engines"].items())) or "-",
                 n["replicas"], _ago(n["heartbeat_at"])) for n in nodes]
        text = "\n".join([*self._standby_note(),
                          _table(["name", "state", "gpus", "gpu free", "load", "agent", "engines", "replicas",
                                  "heard"], rows) if nodes else "no nodes yet: add one with `llmgw node add`"])
        return text, {"answered_by": self._answered_by(), "nodes": nodes}

    async def list_models(self, args: Arguments) -> Answer:
        models = await catalog_of(self.plane).list_models()
        for m in models:
            m["wanted"] = _wanted(m)
        rows = [(m["name"], m["state"], f"{m['replicas']['ready']}/{m['wanted']}" + _scaling(m),
                 ",".join(str(e) for e in m["engines"]), _profiles(m), m["context_length"] or "-",
                 m["source"] or "-") for m in models]
        lines = [*self._standby_note(),
                 _table(["name", "state", "ready/wanted", "engine", "profiles", "context", "source"], rows)
                 if models else "the catalog has no models yet: `llmgw ctl model serve` adds one"]
        # Whole, under the table, as `ctl models` says it: the reason and its commands are too long for a column.
        lines += [f"{m['name']}: {m['parked']}" for m in models if m.get("parked")]
        return "\n".join(lines), {"answered_by": self._answered_by(), "models": models}

    async def list_replicas(self, args: Arguments) -> Answer:
        catalog = catalog_of(self.plane)
        model = args.get("model")
        if model is not None:
            model = (await catalog.show(model))["name"]  # an alias, or a refusal naming the catalog's models
        found = await catalog.replicas(model, args.get("node"))
        # As `ctl replicas`: a stopped replica's row stays ten minutes, and would bury the one that runs.
        hidden = [] if args.get("include_stopped") else [r for r in found if r["state"] == "stopped"]
        shown = [r for r in found if r not in hidden]
        rows = [(r["id"], r["model"], r["node"], ",".join(map(str, r["gpus"])) or "-", r["state"], r["desired"],
                 _ago(r["since"]), _detail(r)) for r in shown]
        lines = [*self._standby_note()]
        lines.append(_table(["id", "model", "node", "gpus", "state", "desired", "since", "detail"], rows) if shown
                     else f"no replicas{' of ' + model if model else ''} are running")
        if hidden:
            lines.append(f"({len(hidden)} stopped {'replica' if len(hidden) == 1 else 'replicas'} not shown; "
                         "include_stopped shows them)")
        return "\n".join(lines), {"answered_by": self._answered_by(), "replicas": shown,
                                  "stopped_not_shown": len(hidden)}

    async def explain_placement(self, args: Arguments) -> Answer:
        e = await catalog_of(self.plane).explain(args["model"])
        lines = [*self._standby_note(),
                 f"{e['model']}: {e['state']}; wants {e['wanted']}, {e['running']} running, {e['ready']} ready"]
        lines += [f"  {note}" for note in e["notes"]]
        rows = []
        for n in e["nodes"]:
            reasons = n["reasons"]
            if n["fits"]:
                fitting = next(p for p in n["profiles"] if p["fits"])
                reasons = [f"profile {fitting['profile']} ({fitting['engine']}); free: {n['free']}"]
            for i, reason in enumerate(reasons or [""]):
                first = i == 0
                rows.append((n["name"] if first else "", ("fits" if n["fits"] else "refused") if first else "",
                             n["replicas"] if first else "", reason))
        if rows:
            lines += ["", _table(["node", "verdict", "here", "why"], rows)]
        if e["actions"]:
            lines += ["", "a placement pass now would:"] + [f"  {action_line(a)}" for a in e["actions"]]
        return "\n".join(lines), {"answered_by": self._answered_by(), **e}

    async def node_logs(self, args: Arguments) -> Answer:
        source = args.get("source") or ""
        answer = await node_logs_of(self.plane, args["node"], source, args.get("lines", DEFAULT_LOG_LINES))
        what = f"shard {source}'s engine" if source else "its agent"
        if not answer["lines"]:
            return f"node {answer['node']}: {what} has logged nothing yet", answer
        count = len(answer["lines"])
        head = f"node {answer['node']}, {what}: " + ("its last line" if count == 1 else f"the last {count} lines")
        return "\n".join([head, *(f"{_when(line['at'])}  {line['text']}" for line in answer["lines"])]), answer


# --- the tools' declarations ----------------------------------------------------------------------

_MODEL = {"type": "string", "minLength": 1, "maxLength": 200,
          "description": "a model's name or alias, as list_models shows it"}
_NODE = {"type": "string", "minLength": 1, "maxLength": 200,
         "description": "a node's name or id, as list_nodes shows it"}

_TOOLS: dict[str, _Tool] = {t.name: t for t in (
    _Tool("cluster_status", "Cluster status",
          "The cluster at a glance, as `llmgw ctl status` and its neighbours say it: the control planes and "
          "which leads, the store, the nodes, each model's ready replicas against what it asked for, the GPUs, "
          "and what is unhealthy.", {}, (), ClusterTools.cluster_status),
    _Tool("list_nodes", "Nodes",
          "Each node (`llmgw ctl nodes`): its state, GPUs and their free memory, load, agent version, the "
          "engines it has, how many replicas it runs, and when it was last heard from.",
          {}, (), ClusterTools.list_nodes),
    _Tool("list_models", "Models",
          "Each model in the catalog (`llmgw ctl models`): its replicas ready against wanted, its state, its "
          "profiles (engine, GPUs, cores, memory), and why one is parked.", {}, (), ClusterTools.list_models),
    _Tool("list_replicas", "Replicas",
          "Each replica (`llmgw ctl replicas`): its model, node, GPUs, state and what it is doing; one model's "
          "or one node's with `model` or `node`. Stopped ones are left out unless include_stopped.",
          {"model": _MODEL, "node": _NODE,
           "include_stopped": {"type": "boolean", "description": "also the replicas stopped in the last ten "
                                                                 "minutes"}},
          (), ClusterTools.list_replicas),
    _Tool("explain_placement", "Explain placement",
          "Why a model runs where it does, or is not placed (`llmgw ctl explain-placement`): every node "
          "considered, whether a replica fits there and why not, and what a placement pass would do now.",
          {"model": _MODEL}, ("model",), ClusterTools.explain_placement),
    _Tool("node_logs", "Node logs",
          "A node's last log lines (`llmgw ctl logs`): its agent's own, or with `source` a shard's engine "
          "output. Asked of the node by the leader; read from what the agent keeps in memory, never a file.",
          {"node": _NODE,
           "source": {"type": "string", "pattern": SHARD_ID.pattern, "maxLength": 128,
                      "description": f"{A_SHARD}; without it, the agent's own log"},
           "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_LINES,
                     "description": f"how many of the last lines (default {DEFAULT_LOG_LINES})"}},
          ("node",), ClusterTools.node_logs),
)}


def descriptors() -> list[dict[str, Any]]:
    """The MCP tool descriptors, the same in every process: a worker lists them without the cluster."""
    return [t.descriptor() for t in _TOOLS.values()]


def _checked(tool: _Tool, arguments: object) -> Arguments:
    """The arguments as the tool's schema allows them, or BadArguments saying what to send instead."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise BadArguments(f"{tool.name}'s arguments are a JSON object, not {type(arguments).__name__}")
    unknown = sorted(set(arguments) - set(tool.properties))
    if unknown:
        takes = f"takes {_listed(tool.properties)}" if tool.properties else "takes no arguments"
        raise BadArguments(f'{tool.name} {takes}, not {", ".join(repr(u) for u in unknown)}')
    for name in tool.required:
        if arguments.get(name) in (None, ""):
            raise BadArguments(f'{tool.name} needs "{name}": {tool.properties[name]["description"]}')
    out: Arguments = {}
    for name, value in arguments.items():
        if value is None:
            continue
        spec = tool.properties[name]
        kind = spec["type"]
        if kind == "string":
            if not isinstance(value, str) or not value.strip():
                raise BadArguments(f'"{name}" is text: {spec["description"]}')
            value = value.strip()
            if len(value) > spec["maxLength"]:
                raise BadArguments(f'"{name}" is at most {spec["maxLength"]} characters: {spec["description"]}')
            if "pattern" in spec and not re.match(spec["pattern"], value):
                # Only node_logs' source has a shape to keep: what reaches the agent is a shard's id, no path.
                raise BadArguments(f'"{name}" is {A_SHARD}, not {value!r}: {tool.name} reads only the lines the '
                                   "node's agent keeps, never a path")
        elif kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    spec["minimum"] <= value <= spec["maximum"]):
                raise BadArguments(f'"{name}" is a whole number from {spec["minimum"]} to {spec["maximum"]}, '
                                   f"not {value!r}")
        elif kind == "boolean" and not isinstance(value, bool):
            raise BadArguments(f'"{name}" is true or false, not {value!r}')
        out[name] = value
    return out


def _error(sentence: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": sentence}], "isError": True}


def _listed(names: Iterable[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# --- what the tools say -----------------------------------------------------------------------------

def _wanted(model: View) -> int:
    """The replicas a model asked for: its scaling's minimum, none while stopped or being removed."""
    return 0 if model["state"] in ("stopped", "removing") else int(model["scaling"]["min"])


def _unhealthy(status: View, nodes: list[View], models: list[View], replicas: list[View],
               waiting: dict[str, str]) -> list[str]:
    out = []
    if not status["store"]["up"]:
        out.append(f"the store at {status['store']['address']} is not answering")
    if status["leader"] is None:
        out.append("no control plane leads: nothing is placed until one does")
    agents = status.get("agents") or {}
    if agents and not agents.get("taking"):
        out.append(f"{status['name']} takes no agents: {agents.get('problem')}")
    for n in nodes:
        if n["state"] != "ready":
            out.append(f"node {n['name']} is {n['state']}, last heard {_ago(n['heartbeat_at'])}")
    for m in models:
        wanted = _wanted(m)
        if m["replicas"]["ready"] < wanted:
            why = m["parked"] or waiting.get(m["name"]) or f"starting; explain_placement {m['name']} says more"
            out.append(f"model {m['name']} has {m['replicas']['ready']} of {wanted} replicas ready ({m['state']}): "
                       f"{why}")
    for r in replicas:
        if r["state"] == "failed" and r["desired"] == "run":
            out.append(f"replica {r['id']} of {r['model']} on {r['node']} failed: {r['message'] or 'no reason given'}")
    return out


class Gpus(TypedDict):
    """The ready nodes' GPUs, summed for cluster_status."""

    count: int
    by_class: dict[str, int]
    memory_mb: int
    free_mb: int


def _gpus(nodes: list[View]) -> Gpus:
    cards = [g for n in nodes if n["state"] == "ready" for g in n["gpus"]]
    by_class: dict[str, int] = {}
    for g in cards:
        by_class[g["class"]] = by_class.get(g["class"], 0) + 1
    return {"count": len(cards), "by_class": by_class, "memory_mb": sum(g["memory_mb"] for g in cards),
            "free_mb": sum(max(g["free_mb"], 0) for g in cards)}


def _gpus_said(gpus: Gpus) -> str:
    if not gpus["count"]:
        return "none on the ready nodes"
    classes = ", ".join(f"{n}×{cls}" for cls, n in gpus["by_class"].items())
    return f"{gpus['count']} ({classes}), {_gib(gpus['free_mb'])} of {_gib(gpus['memory_mb'])} free"


def _cards(gpus: list[View]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g["class"]] = counts.get(g["class"], 0) + 1
    return ", ".join(f"{n}×{cls}" for cls, n in counts.items()) or "-"


def _gpu_free(gpus: list[View]) -> str:
    return " ".join(f"{g['index']}:{_gib(g['free_mb'])}" for g in gpus) or "-"


def _load(node: View) -> str:
    load = node.get("load") or {}
    cpu, used = load.get("cpu_percent"), load.get("memory_used_mb")
    if cpu is None and used is None:
        return "-"
    return f"cpu {cpu or 0:.0f}%, mem {_gib(used)}/{_gib(node['memory_mb'])}"


def _scaling(model: View) -> str:
    sc = model["scaling"]
    said = f" (max {sc['max']})" if sc["max"] != sc["min"] else ""
    return said + (" on demand" if sc["on_demand"] else "")


def _profiles(model: View) -> str:
    said = []
    for p in (model.get("spec") or {}).get("profiles") or []:
        if not isinstance(p, dict):
            continue
        gpus = p.get("gpus")
        count = gpus.get("count") if isinstance(gpus, dict) else gpus
        cores = p.get("cpu_cores")
        where = _count(count, "GPU") if count else _count(cores, "core") if cores else "shared cores"
        said.append(f"{p.get('engine') or '?'} on {where}" + (f", {p['memory']}" if p.get("memory") else ""))
    return "; ".join(said) or "-"


def _detail(r: View) -> str:
    fetch = r.get("fetch")
    if fetch and r["state"] in ("pending", "starting"):
        done, total = fetch.get("bytes_done", 0), fetch.get("bytes_total", 0)
        said = f"{done / 2**30:.1f} of {total / 2**30:.1f} GiB" if total else f"{done / 2**30:.1f} GiB"
        return f"{fetch.get('phase') or 'fetching'} {said}"
    return r["message"] or ""


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _gib(mb: float | None) -> str:
    return "-" if mb is None else f"{mb / 1024:.1f}G"


def _ago(epoch: float | None) -> str:
    if epoch is None:
        return "never"
    delta = max(time.time() - epoch, 0)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if delta >= size or unit == "s":
            return f"{int(delta // size)}{unit} ago"
    return "now"


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _fields(pairs: Sequence[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in pairs) + 1
    return [f"{k + ':':<{width}} {v}" for k, v in pairs]


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]
    return "\n".join(lines)
