"""Hostile requests against a real gateway: no input may give a 5xx or put a traceback in its log.

A real `llmgw server` (guardrails on under the `baseline` policy init
installs, a valid key) in front of a real `llmgw sim-engine`, both on
loopback, and this process sending the cases of fuzzcases.py to every /v1
route and to the admin API, with and without the admin token. Every
request goes on a connection of its own, written byte for byte, so a case
aiohttp's client would refuse to write (a lying Content-Length, a NUL in a
header) is sent as it is and any case can be replayed from its seed and
index alone.

A run fails on any 5xx, any request left unanswered for REQUEST_TIMEOUT,
any JSON refusal on /v1 not in its endpoint's error shape, and any
"Traceback" in the server's or the engine's log. The engine states
that answer 503 or 504 (loading, stopped, a breaker open, a full queue)
are documented, but nothing here should provoke one: the sim answers
every request at once, so one seen here is a find too.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson

from llmgw.benchmark.fuzzcases import Case, cases
from llmgw.benchmark.overhead import _wait_port, end_processes, init_server
from llmgw.control import read_token
from llmgw.ports import unused_port
from llmgw.router import speaks_anthropic

# The body limit the fuzzed gateway runs with: small, so a gzip bomb costs
# this process and the server a megabyte to make and refuse, not 32.
MAX_BODY = 1024 * 1024
REQUEST_TIMEOUT = 30.0
PROGRESS_EVERY = 10.0
# A secret's shape the baseline blocks: proof the guardrails are on.
PLANTED = "ghp_" + "FuzzTokenNotReal0123456789abcdefABCD"


@dataclass
class Rig:
    """A sim-engine and a gateway in front of it, started and stopped by this process."""

    client: tuple[str, int]
    admin: tuple[str, int]
    key: str
    token: str
    tmp: str
    logs: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(cls) -> Rig:
        tmp = tempfile.mkdtemp(prefix="llmgw-fuzz-")
        py = [sys.executable, "-m", "llmgw"]
        procs: list[subprocess.Popen] = []
        logs = {"engine": os.path.join(tmp, "engine.log"), "server": os.path.join(tmp, "server.log")}
        try:
            engine_port = unused_port()
            with open(logs["engine"], "ab") as log:
                procs.append(subprocess.Popen([*py, "sim-engine", "--port", str(engine_port), "--model", "sim",
                                               "--max-tokens-default", "8"], stdout=log, stderr=subprocess.STDOUT))
            _wait_port(engine_port, procs[0], "the sim-engine")
            ports = {r: unused_port() for r in ("client", "agent", "admin", "metrics")}
            config = os.path.join(tmp, "server.yaml")
            with open(config, "w") as f:
                # No guard key: init installs the baseline policy for every request.
                json.dump({"models": [{"name": "sim", "endpoints": [f"http://127.0.0.1:{engine_port}/v1"]}],
                           "router": {"max_body": str(MAX_BODY)}, "log": {"level": "info"}}, f)
            args, key = init_server(py, config, tmp, ports)
            with open(logs["server"], "ab") as log:
                procs.append(subprocess.Popen([*py, "server", *args], stdout=log, stderr=subprocess.STDOUT))
            _wait_port(ports["client"], procs[1], "the gateway")
            token = read_token(os.path.join(tmp, "admin-token"))
        except BaseException:
            for proc in procs:
                proc.kill()
                proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(("127.0.0.1", ports["client"]), ("127.0.0.1", ports["admin"]), key, token, tmp, logs, procs)

    def log_sizes(self) -> dict[str, int]:
        return {name: os.path.getsize(path) for name, path in self.logs.items()}

    def tracebacks(self, since: dict[str, int] | None = None) -> dict[str, list[str]]:
        """Each log's tracebacks (written after `since`, its sizes), each with the lines that say what failed."""
        found: dict[str, list[str]] = {}
        for name, path in self.logs.items():
            with open(path, "rb") as f:
                f.seek((since or {}).get(name, 0))
                lines = f.read().decode(errors="replace").splitlines()
            found[name] = ["\n".join(lines[max(0, i - 2):i + 12]) for i, line in enumerate(lines)
                           if "Traceback (most recent call last)" in line]
        return found

    def stop(self) -> None:
        end_processes(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)


def wire(case: Case, host: str, port: int) -> bytes:
    """The request as bytes: what a client that writes whatever it likes would send."""
    if case.raw is not None:
        return case.raw
    lines = [f"{case.method} {case.path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in case.headers.items()]
    if case.body is not None:
        lines.append(f"Content-Length: {len(case.body)}")
    head = "\r\n".join(lines).encode("utf-8", "surrogateescape") + b"\r\n\r\n"
    return head + (case.body or b"")


@dataclass
class Answer:
    status: int  # 0: closed without an answer; -1: no answer within REQUEST_TIMEOUT
    body: bytes = b""


async def send(case: Case, host: str, port: int) -> Answer:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as e:
        return Answer(0, f"could not connect: {e}".encode())
    try:
        writer.write(wire(case, host, port))
        if case.half_close:
            writer.write_eof()  # a body cut short: the server sees it end
        async with asyncio.timeout(REQUEST_TIMEOUT):
            data = await reader.read()
    except TimeoutError:
        return Answer(-1)
    except OSError:
        data = b""  # the server closed on us mid-write: a refusal without an answer
    finally:
        # Closed with a reset, not a FIN: 30,000 connections in TIME_WAIT
        # would take every ephemeral port of loopback, and the run slowed to
        # half its speed as connect() hunted for a free one.
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 1"):  # 100 Continue, then the answer
        head, _, body = body.partition(b"\r\n\r\n")
    try:
        return Answer(int(head.split(b" ", 2)[1]), body)
    except (IndexError, ValueError):
        return Answer(0, data[:300])


def _code(answer: Answer) -> str:
    try:
        doc = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return "-"
    error = doc.get("error") if isinstance(doc, dict) else None
    return str(error.get("code") or error.get("type") or "-") if isinstance(error, dict) else "-"


def in_shape(case: Case, answer: Answer) -> bool:
    """A JSON refusal on /v1 is in its endpoint's error shape: Anthropic's on messages paths, OpenAI's elsewhere.

    What is not JSON is aiohttp's own answer to a request that is not HTTP,
    sent before any route is known (docs/client-api.md says so).
    """
    if case.target != "client" or not case.path.startswith("/v1/") or not 400 <= answer.status < 500:
        return True
    try:
        doc = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return True
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), dict):
        return False
    if speaks_anthropic(case.path.partition("?")[0]):
        return doc.get("type") == "error" and isinstance(doc["error"].get("message"), str)
    return isinstance(doc["error"].get("message"), str) and "code" in doc["error"]


@dataclass
class Result:
    seed: int
    sent: int = 0
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    codes: Counter = field(default_factory=Counter)
    routes: Counter = field(default_factory=Counter)  # (path, status): which routes answered what
    wrong_shape: int = 0  # refusals on /v1 not in their endpoint's error shape
    failures: list[tuple[int, Case, Answer]] = field(default_factory=list)
    tracebacks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    @property
    def traceback_count(self) -> int:
        return sum(len(found) for found in self.tracebacks.values())

    @property
    def ok(self) -> bool:
        return not self.failures and not self.traceback_count

    def figures(self) -> dict:
        return {"seed": self.seed, "requests": self.sent,
                "by_status": {str(k): v for k, v in sorted(self.statuses.items())},
                "5xx": self.server_errors, "unanswered": self.statuses.get(-1, 0), "wrong_shape": self.wrong_shape,
                "closed_without_answer": self.statuses.get(0, 0), "tracebacks": self.traceback_count,
                "req_per_s": round(self.sent / self.seconds) if self.seconds else 0}

    def report(self, say=print, limit: int = 10) -> None:
        for index, case, answer in self.failures[:limit]:
            status = "no answer" if answer.status == -1 else answer.status
            say(f"fuzz: seed {self.seed} case {index}: {status} to {case.describe()}\n"
                f"      answered: {answer.body[:300]!r}")
        if len(self.failures) > limit:
            say(f"fuzz: … and {len(self.failures) - limit} more")
        for log, found in self.tracebacks.items():
            for text in found[:3]:
                say(f"fuzz: a traceback in the {log}'s log:\n{text}")


async def _run(rig: Rig, seed: int, count: int, concurrency: int, first: int, say=None) -> Result:
    result = Result(seed)
    todo = iter(cases(seed, range(first, first + count), rig.key, rig.token, MAX_BODY))

    async def worker() -> None:
        for index, case in todo:
            host, port = rig.client if case.target == "client" else rig.admin
            answer = await send(case, host, port)
            result.sent += 1
            result.statuses[answer.status] += 1
            result.codes[f"{case.target} {answer.status} {_code(answer)}"] += 1
            result.routes[(case.path.partition("?")[0], answer.status)] += 1
            if answer.status >= 500 or answer.status == -1:
                result.failures.append((index, case, answer))
            elif not in_shape(case, answer):
                result.wrong_shape += 1
                result.failures.append((index, case, answer))

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            say(f"fuzz: {result.sent} of {count} sent, {result.server_errors} 5xx, "
                f"{result.statuses.get(-1, 0)} unanswered")

    began = time.monotonic()
    ticker = asyncio.create_task(progress()) if say else None
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if ticker:
            ticker.cancel()
    result.seconds = time.monotonic() - began
    return result


def guardrails_on(rig: Rig) -> bool:
    """The baseline refuses a planted secret: the fuzz ran with the input scan at work."""
    body = orjson.dumps({"model": "sim", "messages": [{"role": "user", "content": f"use {PLANTED}"}]})
    case = Case("client", "POST", "/v1/chat/completions", "planted secret",
                {"Authorization": f"Bearer {rig.key}", "Content-Type": "application/json"}, body)
    answer = asyncio.run(send(case, *rig.client))
    return answer.status == 400 and _code(answer) == "guardrail_blocked"


def fuzz(rig: Rig, seed: int, count: int, concurrency: int = 16, first: int = 0, say=None) -> Result:
    """Send `count` cases of `seed` (numbered from `first`), and find the tracebacks they left in the logs.

    `say`, when given, is told how far it got every PROGRESS_EVERY seconds.
    """
    before = rig.log_sizes()
    result = asyncio.run(_run(rig, seed, count, concurrency, first, say))
    time.sleep(0.2)  # a line logged as the last answer went out
    result.tracebacks = rig.tracebacks(since=before)
    return result


def main(count: int = 30_000, seed: int | None = None, concurrency: int = 16, say=print) -> int:
    """`python3 build.py bench fuzz`: the long run; prints its figures and the first failures."""
    seed = random.randrange(1 << 30) if seed is None else seed  # noqa: S311 - a seed to replay, not a secret
    say(f"fuzz: {count} requests, seed {seed} (rerun with the same seed to send the same requests)")
    rig = Rig.start()
    try:
        if not guardrails_on(rig):
            say("fuzz: the baseline policy did not refuse a planted secret, so this would fuzz a gateway "
                "without its input scan; not run")
            return 1
        result = fuzz(rig, seed, count, concurrency, say=say)
    finally:
        rig.stop()
    figures = result.figures()
    for name in ("requests", "5xx", "unanswered", "wrong_shape", "closed_without_answer", "tracebacks"):
        say(f"fuzz_{name}: {figures[name]}")
    say(f"fuzz_throughput: {figures['req_per_s']} req/s")
    for status, n in figures["by_status"].items():
        say(f"fuzz_status_{status}: {n}")
    say("fuzz: answers by target, status and code:")
    for what, n in result.codes.most_common():
        say(f"  {n:6d}  {what}")
    result.report(say)
    return 0 if result.ok else 1
