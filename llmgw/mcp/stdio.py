"""A company's MCP server run on the control plane, spoken to over its standard input and output.

Run as an engine is (llmgw.agent.supervisor.users): a control plane that is
root runs it as an unprivileged user, `llmgw-mcp` unless the server names
another, made the first time it is needed; one that is not root runs it as
itself. It starts at its first use, in a process group of its own, with an
environment of its own: PATH, HOME, LANG and the server's "headers" as
variables (its credentials), never the control plane's environment, which
may hold llmgw's own secrets. Its standard error is kept in a short ring
for the log (never for a caller). A server that exits is started again at the next call.

Messages are JSON-RPC, one a line. Requests from the server (ping, roots)
are answered so it is never left waiting.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shlex
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from llmgw.agent import RunAs, UserError, resolve
from llmgw.mcp.upstream import CLIENT_INFO, MAX_ANSWER, PROTOCOL_VERSION, Progress, UpstreamError, every_tool

if TYPE_CHECKING:
    from llmgw.mcp.servers import Servers  # which imports this module where it checks a stdio: address
    from llmgw.store import McpServer

log = logging.getLogger("llmgw.mcp")

PREFIX = "stdio:"
DEFAULT_USER = "llmgw-mcp"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_of(url: str) -> list[str]:
    """The command line a `stdio:` URL holds; ValueError when it holds none."""
    argv = shlex.split(url[len(PREFIX):])
    if not argv:
        raise ValueError("a stdio server needs a command: stdio:COMMAND ARGS…")
    return argv


class StdioUpstream:
    def __init__(self, name: str, argv: list[str], env: Callable[[], Awaitable[dict[str, str]]],
                 user: str | None, timeout: float):
        self.name, self._argv, self._env, self._user, self._timeout = name, argv, env, user, timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}  # each a JSON-RPC answer, as the server sent it
        self._progress: dict[str, Progress] = {}
        self._ids = itertools.count(1)
        self._starting = asyncio.Lock()
        self._stderr: deque[str] = deque(maxlen=20)

    async def list_tools(self) -> list[dict[str, Any]]:
        return await every_tool(lambda params: self._request("tools/list", params, None))

    async def call_tool(self, name: str, arguments: dict[str, Any], progress: Progress | None = None,
                        caller: Mapping[str, str] | None = None) -> dict[str, Any]:
        # No headers to carry the caller on a pipe: it goes in the request's _meta, where MCP keeps such things.
        meta: dict[str, Any] = {"llmgw/caller": dict(caller or {})}
        params: dict[str, Any] = {"name": name, "arguments": arguments, "_meta": meta}
        return await self._request("tools/call", params, progress)

    async def close(self) -> None:
        proc = self._proc
        self._proc = None
        if self._reader is not None:
            self._reader.cancel()
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 5)
            except (ProcessLookupError, PermissionError):
                pass
            except TimeoutError:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._fail_pending("was stopped")

    async def _request(self, method: str, params: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self._timeout):
                await self._ensure()
                answer = await self._send(method, params, progress)
        except TimeoutError:
            raise UpstreamError(f"the MCP server {self.name} did not answer in {self._timeout:g} s") from None
        error = answer.get("error")
        if isinstance(error, dict):
            raise UpstreamError(f"the MCP server {self.name} refused {method}: {str(error.get('message'))[:300]}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"the MCP server {self.name} answered {method} without a result")
        return result

    async def _ensure(self) -> None:
        async with self._starting:
            if self._proc is not None and self._proc.returncode is None:
                return
            await self._start()
            answer = await self._send("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                     "clientInfo": CLIENT_INFO}, None)
            if not isinstance(answer.get("result"), dict):
                raise UpstreamError(f"the MCP server {self.name} did not accept llmgw's initialize")
            await self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _start(self) -> None:
        try:
            run_as = await asyncio.to_thread(resolve, DEFAULT_USER if self._user is None else self._user)
        except UserError as e:
            raise UpstreamError(f"the MCP server {self.name} cannot be started: {e}") from None
        env = {"PATH": _PATH, "LANG": "C.UTF-8", "HOME": _home(run_as), "USER": run_as.name, "LOGNAME": run_as.name,
               **await self._env()}
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=_home(run_as), start_new_session=True,
                limit=MAX_ANSWER + 65536, **run_as.popen_args())
        except (OSError, ValueError) as e:
            raise UpstreamError(f"the MCP server {self.name} could not be started ({self._argv[0]}): {e}") from None
        log.info("started the MCP server %s as pid %d (user %s)", self.name, self._proc.pid, run_as.name)
        self._reader = asyncio.get_running_loop().create_task(self._read(self._proc))

    async def _send(self, method: str, params: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        token = None
        if progress is not None:
            token = f"llmgw-{ident}"
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": token}}
            self._progress[token] = progress
        try:
            await self._write({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(ident, None)
            if token is not None:
                self._progress.pop(token, None)

    async def _write(self, message: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise UpstreamError(f"the MCP server {self.name} is not running{self._said()}")
        try:
            proc.stdin.write(orjson.dumps(message) + b"\n")
            await proc.stdin.drain()
        except (ConnectionError, BrokenPipeError):
            raise UpstreamError(f"the MCP server {self.name} stopped reading{self._said()}") from None

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        errors = asyncio.get_running_loop().create_task(self._drain(proc.stderr))
        try:
            while True:
                try:
                    line = await proc.stdout.readline()
                except ValueError:  # a line past the limit: the answer is too large
                    self._fail_pending(f"answered more than {MAX_ANSWER // (1024 * 1024)} MB")
                    await self.close()
                    return
                if not line:
                    break
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a server's own chatter on stdout: not a message
                if isinstance(message, dict):
                    await self._dispatch(message)
        finally:
            errors.cancel()
        await proc.wait()
        self._fail_pending(f"exited with {proc.returncode}{self._said()}")

    async def _dispatch(self, message: dict[str, Any]) -> None:
        method, ident = message.get("method"), message.get("id")
        if method is None:
            future = self._pending.get(ident) if isinstance(ident, int) else None
            if future is not None and not future.done():
                future.set_result(message)
            return
        if method == "notifications/progress":
            params = message.get("params") or {}
            progress = self._progress.get(str(params.get("progressToken")))
            if progress is not None:
                await progress(params)
            return
        if ident is not None:  # the server asks something of its client: ping gets {}, the rest a refusal
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": ident}
            if method == "ping":
                answer["result"] = {}
            else:
                answer["error"] = {"code": -32601, "message": f"llmgw does not answer {str(method)[:100]}"}
            try:
                await self._write(answer)
            except UpstreamError:
                pass

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self._stderr.append(line.decode("utf-8", "replace").rstrip()[:300])

    def _fail_pending(self, why: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UpstreamError(f"the MCP server {self.name} {why}"))

    def _said(self) -> str:
        # What it wrote on its standard error goes to the log, not to the caller: it may name its own secrets.
        if self._stderr:
            log.warning("the MCP server %s last wrote: %s", self.name, " | ".join(self._stderr))
        return ""


def _home(run_as: RunAs) -> str:
    if run_as.switches and os.path.isdir(run_as.home):
        return run_as.home
    return "/" if run_as.switches else os.path.expanduser("~")


def stdio_upstream(record: McpServer, servers: Servers) -> StdioUpstream:
    """The upstream for a registered `stdio:` server; its headers (plain, by reference, sealed) are its environment."""

    async def env() -> dict[str, str]:
        from llmgw.mcp.servers import ServerError

        try:
            return dict(await servers.credentials(record))
        except ServerError as e:
            raise UpstreamError(str(e)) from None

    return StdioUpstream(record.name, command_of(record.url), env, record.run_as, record.timeout)
