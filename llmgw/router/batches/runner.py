"""The leader sends each batch's lines, through the same path a /v1 request takes, and writes its files.

Each line goes through handlers.serve, in-process, as the batch's key: its
limits, budgets and guardrails, the router's routing and retries, and its
one usage row, priced at the model's batch discount. It runs in the `batch`
profile and at the lowest admission band, so that when a model is full the
people at a chat window are let in before the waiting lines.

A line's result and its usage row are recorded in one transaction, and
only while the line is still pending (Store.finish_lines). Results are
recorded a few dozen at a time, not one a transaction; a control plane
that dies (SIGKILL included) loses the results it had not yet recorded,
and the next leader sends exactly those lines again: none is lost, and
none is counted twice.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable

import orjson

from llmgw.account import Principal, chat_key_id, principal_of
from llmgw.config import AdmissionSettings
from llmgw.router.apis import by_route
from llmgw.router.batches.inputs import Line, read_lines
from llmgw.router.batches.keeper import FileKeeper, place_for
from llmgw.router.call import new_request_id
from llmgw.router.handlers import Inside, serve
from llmgw.router.media import MEDIA_PURPOSES
from llmgw.router.plane import ClientPlane
from llmgw.router.wire import JSON
from llmgw.store import Batch, BatchLine, LineResult, StoredFile, StoreError, Usage
from llmgw.store.records_batch import OPEN_BATCH
from llmgw.tasks import cancel_and_wait, event_within

log = logging.getLogger("llmgw.batches")

POLL = 1.0  # seconds between looks at the store for new, cancelled and expired batches
FLUSH_LINES = 64  # results recorded in one transaction at most
FLUSH_EVERY = 0.5  # seconds a result waits at most before it is recorded
SWEEP_EVERY = 3600.0  # seconds between deletions of what router.batch.retain_days no longer keeps
PRINCIPAL_TTL = 30.0  # a key revoked, or its limits changed, is seen by its batch within this
PROFILE = "batch"
CHAT_KEY = chat_key_id("")  # the front of a person's portal credential's key id: chat_ and the person's id
MAX_LINES_READ = 10 ** 7  # the file was checked against router.batch.max_lines at upload


def lowest_band(admission: AdmissionSettings) -> str | None:
    """The band batch lines wait in: the one of lowest priority, so every other band's requests go first."""
    bands = admission.bands
    return min(bands, key=lambda b: b.priority).name if bands else None


class BatchRunner:
    def __init__(self, plane: ClientPlane, leading: Callable[[], bool]) -> None:
        self.plane = plane
        self.leading = leading
        self.keeper = FileKeeper(plane.store, plane.cfg.data_dir)
        self._task: asyncio.Task[None] | None = None
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[str] = set()  # batches cancelled or expired: no new line is sent
        self._running = 0  # lines in flight over every batch
        self._freed = asyncio.Event()
        self._swept = -SWEEP_EVERY

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="batch runner")

    async def stop(self) -> None:
        """Lines in flight are dropped, not recorded: the next leader sends them again."""
        await cancel_and_wait(self._task, *self._drivers.values())
        self._drivers.clear()

    async def _watch(self) -> None:
        while True:
            try:
                if self.leading():
                    await self._look()
                    if time.monotonic() - self._swept >= SWEEP_EVERY:
                        self._swept = time.monotonic()
                        await self.sweep(time.time())
            except StoreError as e:
                log.warning("batches: the store did not answer (%s); looking again in %.0f s", e, POLL)
            await asyncio.sleep(POLL)

    async def _look(self) -> None:
        now = time.time()
        for batch in await self.plane.store.open_batches():
            if batch.status == "cancelling" or now >= batch.expires_at:
                self._stopping.add(batch.id)
            if batch.id not in self._drivers:
                task = asyncio.create_task(self._drive(batch), name=f"batch {batch.id}")
                self._drivers[batch.id] = task
                task.add_done_callback(functools.partial(self._ended, batch.id))

    async def sweep(self, now: float) -> tuple[int, int]:
        """Delete files and ended batches older than router.batch.retain_days; (files, batches) deleted."""
        days = self.plane.settings.current.router.batch.retain_days
        if not days:
            return 0, 0
        before = now - days * 86400.0
        files = 0
        # Pictures and runs' files are the job runner's to delete, after router.jobs.retain_days.
        while old := await self.plane.store.old_files(before, exclude=MEDIA_PURPOSES):
            for file in old:
                files += await self.keeper.delete(file)
        batches = await self.plane.store.delete_ended_batches(before)
        if files or batches:
            log.info("batches: deleted %d file(s) and %d batch(es) older than %d days (router.batch.retain_days)",
                     files, batches, days)
        return files, batches

    def _ended(self, batch_id: str, task: asyncio.Task[None]) -> None:
        self._drivers.pop(batch_id, None)
        self._stopping.discard(batch_id)
        if not task.cancelled() and task.exception() is not None:
            log.error("batch %s: stopped by %r; the leader takes it up again", batch_id, task.exception())

    # one batch

    async def _drive(self, batch: Batch) -> None:
        store = self.plane.store
        if batch.status in ("in_progress", "validating", "cancelling"):
            lines = await self._inputs(batch)
            if lines is None:
                return
            if not await self._send_all(batch, lines):
                return  # no longer leading: the next leader carries on with the lines still pending
        # As the store has it now: a cancel that came while the lines ran wins over their finishing.
        fresh = await store.batch_by_id(batch.id)
        if fresh is None:
            return
        now = time.time()
        if fresh.status == "cancelling":
            await self._finish(fresh, ("cancelling",), "cancelled", "cancelled_at")
        elif fresh.status in ("in_progress", "validating") and now >= fresh.expires_at:
            # Past its window: what was not sent is an error line each, counted as failed.
            left = await store.batch_lines(batch.id, "pending")
            await store.finish_lines(batch.id, [
                LineResult(line.line, "error", _failed_line(line.custom_id, "batch_expired",
                                                            "this line was not sent before the batch expired"))
                for line in left])
            await self._finish(fresh, ("in_progress", "validating"), "expired", "expired_at")
        elif fresh.status == "finalizing" or await store.move_batch(
                batch.id, ("in_progress", "validating"), "finalizing", {"finalizing_at": now}):
            await self._finish(fresh, ("finalizing",), "completed", "completed_at")
        # else: cancelled between the read and the move; the next look finishes it as cancelled

    async def _inputs(self, batch: Batch) -> dict[int, Line] | None:
        file = await self.plane.store.file_by_id(batch.input_file_id)
        content = None if file is None else await self.keeper.read(file)
        if content is None:
            await self._fail(batch, "input_file_missing", f"the input file {batch.input_file_id} is gone, or its "
                                                          "bytes are not on this control plane's disk")
            return None
        return {line.number: line for line in read_lines(content, MAX_LINES_READ)}

    async def _fail(self, batch: Batch, code: str, message: str) -> None:
        log.warning("batch %s failed: %s", batch.id, message)
        await self.plane.store.move_batch(batch.id, OPEN_BATCH, "failed", {
            "failed_at": time.time(), "errors": [{"code": code, "message": message, "param": None, "line": None}]})

    async def _send_all(self, batch: Batch, lines: dict[int, Line]) -> bool:
        """Send the pending lines and record their results; False when it stopped short for losing the lead."""
        store = self.plane.store
        todo = deque(await store.pending_lines(batch.id))
        tasks: set[asyncio.Task[LineResult]] = set()
        recorded: list[LineResult] = []
        flushed = time.monotonic()
        principal = _Principal(self.plane, batch.key_id, batch.project_id)
        try:
            while (todo and self._sends(batch.id)) or tasks:
                most = self.plane.settings.current.router.batch.concurrency
                while todo and self._sends(batch.id) and self._running < most:
                    number = todo.popleft()
                    self._running += 1
                    task = asyncio.create_task(self._send(batch, principal, lines[number]))
                    # A callback, not a finally: a task cancelled before it first ran never reaches its finally.
                    task.add_done_callback(self._release)
                    tasks.add(task)
                if not tasks:  # every slot is another batch's: wait for one to free
                    self._freed.clear()
                    await event_within(self._freed, FLUSH_EVERY)
                    continue
                done, tasks = await asyncio.wait(tasks, timeout=FLUSH_EVERY, return_when=asyncio.FIRST_COMPLETED)
                recorded.extend(task.result() for task in done)
                if recorded and (len(recorded) >= FLUSH_LINES or time.monotonic() - flushed >= FLUSH_EVERY):
                    await store.finish_lines(batch.id, recorded)
                    recorded, flushed = [], time.monotonic()
                    # A cancel is seen at each record, not only at the next look: no more lines go after it.
                    fresh = await store.batch_by_id(batch.id)
                    if fresh is None or fresh.status == "cancelling":
                        self._stopping.add(batch.id)
            if recorded:
                await store.finish_lines(batch.id, recorded)
            return not todo or batch.id in self._stopping
        except BaseException:
            # Stopped (or the store failed): what finished is recorded if it can be; what was in flight is
            # left pending, for the next leader to send.
            for task in tasks:
                task.cancel()
            if recorded:
                try:
                    await asyncio.shield(store.finish_lines(batch.id, recorded))
                except (StoreError, asyncio.CancelledError):
                    pass
            raise

    def _sends(self, batch_id: str) -> bool:
        return batch_id not in self._stopping and self.leading()

    def _release(self, task: asyncio.Task[LineResult] | None = None) -> None:
        self._running -= 1
        self._freed.set()

    async def _send(self, batch: Batch, principal: _Principal, line: Line) -> LineResult:
        who = await principal.get()
        refusal = "the key that made this batch is gone" if who is None else who.refusal(time.time())
        if refusal is not None or who is None:
            return LineResult(line.number, "error", _failed_line(line.custom_id, "invalid_api_key", str(refusal)))
        kept: list[Usage] = []
        request_id = new_request_id()
        band = lowest_band(self.plane.settings.current.router.admission)
        inside = Inside(body=line.body, profile=PROFILE, band=band, batch_id=batch.id, keep=kept.append)
        response = await serve(self.plane, by_route(line.url), who, request_id, None, inside)
        raw = getattr(response, "body", None)
        try:
            body = orjson.loads(raw) if isinstance(raw, (bytes, bytearray)) else None
        except orjson.JSONDecodeError:
            body = None
        result = {"id": "batch_req_" + request_id[4:], "custom_id": line.custom_id,
                  "response": {"status_code": response.status, "request_id": request_id, "body": body},
                  "error": None}
        return LineResult(line.number, "done" if response.status < 400 else "error", result,
                          kept[0] if kept else None)

    async def _finish(self, batch: Batch, from_statuses: tuple[str, ...], status: str, stamp: str) -> None:
        store = self.plane.store
        out = await self._write(batch, "output", await store.batch_lines(batch.id, "done"))
        errors = await self._write(batch, "error", await store.batch_lines(batch.id, "error"))
        if await store.move_batch(batch.id, from_statuses, status,
                                  {stamp: time.time(), "output_file_id": out, "error_file_id": errors}):
            log.info("batch %s %s", batch.id, status)

    async def _write(self, batch: Batch, kind: str, lines: list[BatchLine]) -> str | None:
        """The output or error file, under an id made from the batch's: a leader that wrote it and died before
        the batch said so finds it written, rather than writing a second."""
        if not lines:
            return None
        file_id = "file-" + hashlib.sha256(f"{batch.id}/{kind}".encode()).hexdigest()[:24]
        if await self.plane.store.file_by_id(file_id) is not None:
            return file_id
        content = b"".join(orjson.dumps(line.result) + b"\n" for line in lines)
        store_below = int(self.plane.settings.current.router.batch.store_below)
        file = StoredFile(file_id, batch.project_id, None, "batch_output", f"{batch.id}_{kind}.jsonl", len(content),
                          time.time(), place_for(len(content), store_below))
        await self.keeper.keep(file, content)
        return file_id


def _failed_line(custom_id: str, code: str, message: str) -> JSON:
    return {"id": None, "custom_id": custom_id, "response": None, "error": {"code": code, "message": message}}


class _Principal:
    """The batch's key as a request with it is held to, read again every PRINCIPAL_TTL."""

    def __init__(self, plane: ClientPlane, key_id: str, project_id: str) -> None:
        self.plane, self.key_id, self.project_id = plane, key_id, project_id
        self._read_at = -PRINCIPAL_TTL
        self._principal: Principal | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Principal | None:
        async with self._lock:
            if time.monotonic() - self._read_at >= PRINCIPAL_TTL:
                self._principal = await principal_for_work(self.plane, self.key_id, self.project_id)
                self._read_at = time.monotonic()
            return self._principal


async def principal_for_work(plane: ClientPlane, key_id: str, project_id: str) -> Principal | None:
    """Whom work left to run later is done as (a batch's lines, a workflow run): its key, as it is now; or, for work
    made with a person's portal credential, which has no key row, the person in the project while they are still
    active and its member. None when neither is there any more."""
    if key_id.startswith(CHAT_KEY):
        return await plane.chat.for_work(key_id.removeprefix(CHAT_KEY), project_id)
    key = await plane.store.key_by_id(key_id)
    return None if key is None else await principal_of(plane.store, key)
