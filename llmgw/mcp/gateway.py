"""What /mcp serves: the registered servers' tools, as each caller's grants allow, relayed with bounds.

The servers and their tool lists are kept in memory: the table is read
again every POLL seconds (so a change made on another control plane is
served here within half a minute) and a server's tools every TOOLS_TTL. A
call reads nothing from the store: the caller's grants come with its key
from the key cache, and the audit row is written after the answer, off
the caller's path.

Bounds and limits, per server: its timeout (60 s unless set) and 4 MB an
answer (upstream.py); `rate` calls a minute per caller; a breaker that
takes a server out for BREAKER_OPEN seconds after BREAKER_FAILURES calls
failing in a row (its tools leave the list, a call is answered at once).
A failure is the server not answering or answering wrongly; a tool that
answers isError has answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Histogram

from llmgw.account import Principal
from llmgw.mcp.guarding import Guarding, GuardRefusal
from llmgw.mcp.media import MediaTools
from llmgw.mcp.plane import McpPlane
from llmgw.mcp.servers import IN_PROCESS, MEDIA, STDIO, ServerError, Servers
from llmgw.mcp.stdio import stdio_upstream
from llmgw.mcp.upstream import HttpUpstream, InProcessUpstream, Progress, Upstream, UpstreamError
from llmgw.router import providers_session
from llmgw.store import AuditEntry, McpServer, StoreError

log = logging.getLogger("llmgw.mcp")

POLL = 10.0
TOOLS_TTL = 300.0
BREAKER_FAILURES = 5
BREAKER_OPEN = 60.0


class CallRefused(Exception):
    """A call answered with an isError result and this sentence; `outcome` for the audit log and metrics."""

    def __init__(self, message: str, outcome: str):
        super().__init__(message)
        self.outcome = outcome


class UnknownTool(Exception):
    """A tool this caller cannot see: answered as a JSON-RPC error, the same whether it exists or not."""


class ServerState(TypedDict):
    """What this process knows of a server now (Gateway.state), for the admin page."""

    breaker: Literal["open", "closed"]
    open_for: float  # seconds until the breaker lets it back in; 0 when closed
    failures: int  # calls failed in a row
    tools: int | None  # how many tools it offered when last asked; None: not asked yet


@dataclass
class Served:
    record: McpServer
    upstream: Upstream
    tools: list[dict[str, Any]] | None = None
    tools_at: float = 0.0
    failures: int = 0
    open_until: float = 0.0
    calls: dict[str, deque[float]] = field(default_factory=dict)  # caller's key id -> call times this minute
    loading: asyncio.Task[None] | None = None

    def out(self, now: float) -> bool:
        return self.open_until > now


class Gateway:
    def __init__(self, plane: McpPlane, registry: CollectorRegistry):
        self.plane = plane
        self.servers = Servers(plane.store, plane.cfg.data_dir, plane.cfg)
        self.guarding = Guarding(plane)
        self._served: dict[str, Served] = {}
        self._guarded: aiohttp.ClientSession | None = None
        self._open: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self.calls = Counter("llmgw_mcp_tool_calls", "MCP tool calls through /mcp, by server, tool and outcome",
                             ["server", "tool", "outcome"], registry=registry)
        self.seconds = Histogram("llmgw_mcp_tool_call_seconds", "How long an MCP tool call through /mcp took",
                                 ["server", "tool"], registry=registry,
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

    # lifecycle

    async def start(self) -> None:
        self._guarded = providers_session()
        self._open = aiohttp.ClientSession(auto_decompress=True)
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for served in self._served.values():
            if served.loading is not None:
                served.loading.cancel()
            self._closing(served)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        for session in (self._guarded, self._open):
            if session is not None:
                await session.close()

    def changed(self) -> None:
        """A server was added, changed or removed here: read the table now, not at the next poll."""
        self._changed.set()

    def state(self, name: str) -> ServerState | None:
        """What this process knows of a server now, for the admin page: whether its breaker holds it out
        (and for how long), its failures in a row, and how many tools it offered when last asked (None:
        not asked yet). None: the server is not (yet) read here."""
        served = self._served.get(name)
        if served is None:
            return None
        left = served.open_until - time.monotonic()
        return {"breaker": "open" if left > 0 else "closed", "open_for": max(0.0, left),
                "failures": served.failures, "tools": None if served.tools is None else len(served.tools)}

    async def _poll(self) -> None:
        while True:
            try:
                await self.reload()
            except StoreError as e:
                log.warning("the MCP servers could not be read: %s; serving the ones known", e)
            except Exception:
                log.exception("the MCP servers could not be read again")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), POLL)
            except TimeoutError:
                pass

    async def reload(self) -> None:
        rows = {s.name: s for s in await self.plane.store.list_mcp_servers()}
        for name in list(self._served):
            if name not in rows:
                self._drop(name)
        for name, record in rows.items():
            served = self._served.get(name)
            if served is not None and served.record.version == record.version:
                continue
            try:
                upstream = self._upstream(record)
            except Exception:
                # One server that cannot be set up (a stdio user gone, a bug) must not keep every other
                # server's change from being read; it is tried again at the next poll.
                log.exception("the MCP server %s could not be set up; the others are served", name)
                continue
            if served is not None:
                self._drop(name)
            self._served[name] = Served(record, upstream)
        now = time.monotonic()
        for served in self._served.values():
            if not served.record.disabled and now - served.tools_at > TOOLS_TTL:
                self._load(served)

    def _drop(self, name: str) -> None:
        served = self._served.pop(name)
        if served.loading is not None:
            served.loading.cancel()
        self._closing(served)

    def _closing(self, served: Served) -> None:
        close = getattr(served.upstream, "close", None)  # a stdio server's process is stopped with it
        if close is not None:
            task = asyncio.get_running_loop().create_task(close())
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    def _upstream(self, record: McpServer) -> Upstream:
        if record.url == IN_PROCESS:
            return InProcessUpstream(self.plane)
        if record.url == MEDIA:
            return MediaTools(self.plane)
        if record.url.startswith(STDIO):
            return stdio_upstream(record, self.servers)
        session = self._open if record.allow_private else self._guarded
        assert session is not None, "the gateway is started before it serves"

        async def headers() -> dict[str, str]:
            try:
                return await self.servers.credentials(record)
            except ServerError as e:
                raise UpstreamError(str(e)) from None

        return HttpUpstream(record.name, record.url, headers, session, record.timeout)

    def _load(self, served: Served) -> asyncio.Task[None]:
        if served.loading is None or served.loading.done():
            served.loading = asyncio.get_running_loop().create_task(self._read_tools(served))
        return served.loading

    async def _read_tools(self, served: Served) -> None:
        try:
            tools = await served.upstream.list_tools()
        except UpstreamError as e:
            log.warning("%s", e)
            self._failed(served)
            served.tools_at = time.monotonic() - TOOLS_TTL + POLL  # asked again at the next poll
            return
        except Exception:
            log.exception("the MCP server %s's tools could not be listed", served.record.name)
            self._failed(served)
            return
        served.tools, served.tools_at = tools, time.monotonic()
        served.failures = 0

    def _failed(self, served: Served) -> None:
        served.failures += 1
        if served.failures >= BREAKER_FAILURES:
            served.open_until = time.monotonic() + BREAKER_OPEN
            served.failures = 0
            log.warning("the MCP server %s failed %d calls in a row; its tools are out for %g s",
                        served.record.name, BREAKER_FAILURES, BREAKER_OPEN)

    # what a caller sees and calls

    async def tools_for(self, principal: Principal) -> list[dict[str, Any]]:
        now = time.monotonic()
        live = [s for s in self._served.values() if not s.record.disabled and not s.out(now)]
        grants = principal.limits
        if not grants.tools:
            return []  # nothing granted anywhere: no server need be asked
        waiting = [self._load(s) for s in live if s.tools is None]
        if waiting:
            await asyncio.wait(waiting, timeout=max(s.record.timeout for s in live))
        listed: list[dict[str, Any]] = []
        for served in sorted(live, key=lambda s: s.record.name):
            if served.out(now):
                continue
            for tool in served.tools or []:
                name = f"{served.record.name}.{tool['name']}"
                if grants.allows_tool(name):
                    listed.append(_descriptor(name, tool, served.record))
        return listed

    async def call(self, principal: Principal, name: str, arguments: dict[str, Any],
                   progress: Progress | None) -> dict[str, Any]:
        """The tool's CallToolResult (redacted as the caller's policy says), or an isError one saying why not.

        Raises UnknownTool for a tool this caller may not see."""
        server, _, tool = name.partition(".")
        served = self._served.get(server)
        if served is None or served.record.disabled or not tool or not principal.limits.allows_tool(name):
            raise UnknownTool(name)
        if served.tools is not None and not any(t["name"] == tool for t in served.tools):
            raise UnknownTool(name)  # not offered when last listed: the server is not asked for it
        started = time.monotonic()
        raw = _canonical(arguments)
        outcome = "ok"
        try:
            result = await self._call(served, principal, tool, arguments, progress)
            if result.get("isError"):
                outcome = "tool_error"
        except CallRefused as e:
            outcome = e.outcome
            result = {"content": [{"type": "text", "text": str(e)}], "isError": True}
        took = time.monotonic() - started
        self.calls.labels(server, tool, outcome).inc()
        self.seconds.labels(server, tool).observe(took)
        self._audit(principal, name, outcome, took, raw)
        return result

    async def _call(self, served: Served, principal: Principal, tool: str, arguments: dict[str, Any],
                    progress: Progress | None) -> dict[str, Any]:
        now = time.monotonic()
        name = served.record.name
        if served.out(now):
            raise CallRefused(f"the MCP server {name} failed {BREAKER_FAILURES} calls in a row and is out until "
                              f"{served.open_until - now:.0f} s from now; try again then", "breaker_open")
        if served.record.rate is not None:
            window = served.calls.setdefault(principal.key.id, deque())
            while window and window[0] <= now - 60:
                window.popleft()
            if len(window) >= served.record.rate:
                wait = 60 - (now - window[0])
                raise CallRefused(f"this key may call the MCP server {name}'s tools {served.record.rate} times a "
                                  f"minute; try again in {max(1, round(wait))} s", "rate_limited")
            window.append(now)
        try:
            arguments = self.guarding.arguments(principal, arguments)
        except GuardRefusal as e:
            raise CallRefused(f"the arguments were refused before they left: {e}", "guardrail_blocked") from None
        try:
            if isinstance(served.upstream, MediaTools):  # answered here, as the caller's own requests
                result = await served.upstream.call_as(principal, tool, arguments, progress)
            else:
                result = await served.upstream.call_tool(tool, arguments, progress, _caller(principal))
        except UpstreamError as e:
            self._failed(served)
            raise CallRefused(str(e), "failed") from None
        except Exception:
            # An answer no branch above foresaw: the caller gets a sentence, the log the details.
            log.exception("the MCP server %s's answer to %s could not be read", name, tool)
            self._failed(served)
            raise CallRefused(f"the MCP server {name} answered in a way llmgw could not read; the control "
                              "plane's log says more", "failed") from None
        if not isinstance(result, dict):
            self._failed(served)
            raise CallRefused(f"the MCP server {name} answered without a tool result", "failed")
        served.failures = 0
        if not isinstance(result.get("content"), list):
            result = {**result, "content": []}
        try:
            return self.guarding.answer(principal, result)
        except GuardRefusal as e:
            raise CallRefused(f"the tool's answer was refused and does not reach you: {e}",
                              "guardrail_blocked") from None

    def _audit(self, principal: Principal, target: str, outcome: str, took: float, raw: bytes) -> None:
        entry = AuditEntry(at=time.time(), actor=f"key {principal.key.id}", via="mcp", action="mcp.call",
                           target=target, after={
                               "key": principal.key.id, "project": str(principal.path), "outcome": outcome,
                               "seconds": round(took, 3), "arguments_bytes": len(raw),
                               "arguments_sha256": hashlib.sha256(raw).hexdigest()})
        task = asyncio.get_running_loop().create_task(self._write(entry))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, entry: AuditEntry) -> None:
        try:
            await self.plane.store.add_audit(entry)
        except StoreError as e:
            log.error("an MCP call to %s could not be written to the audit log: %s", entry.target, e)


def _canonical(arguments: Mapping[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)


def _caller(principal: Principal) -> dict[str, str]:
    """Who calls, for the server: the key's id (never its secret), its owner, its project."""
    headers = {"X-Llmgw-Key": principal.key.id, "X-Llmgw-Project": str(principal.path)}
    if principal.key.person_id:
        headers["X-Llmgw-User"] = principal.key.person_id
    # Header values are latin-1 on the wire: a project named in another script is sent percent-encoded.
    return {k: v if v.isascii() else _quoted(v) for k, v in headers.items()}


def _quoted(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="/")


def _descriptor(name: str, tool: dict[str, Any], record: McpServer) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    for part in ("title", "description", "inputSchema", "outputSchema", "annotations"):
        if part in tool:
            out[part] = tool[part]
    out.setdefault("inputSchema", {"type": "object"})
    if record.description and "description" not in out:
        out["description"] = record.description
    return out
