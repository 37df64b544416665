"""The leader runs the workflow jobs: each through handlers.serve as the job's key, on a replica it chose.

A ComfyUI replica runs one workflow at a time, so a run sent to a busy
replica waits on its card while a run of another model, whose card is free,
could go now (the original's H7, seen on its PoC). So runs are started
here, not queued on the replicas: at most `router.jobs.per_model` runs on
one replica of a model, and `router.jobs.per_node` on one node over all
its models, oldest first, a run whose replicas are all busy passed over
for the next.

Progress is written to the store at most once a second a run, never per
step. A run this leader did not start but the store lists as running was a
lost leader's: it is queued again, and runs again from the start (a
workflow holds nothing between steps a second replica could carry on from).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from llmgw.account import Principal
from llmgw.engines import Progress
from llmgw.router.apis import WORKFLOWS
from llmgw.router.batches.keeper import FileKeeper
from llmgw.router.batches.runner import PRINCIPAL_TTL, lowest_band, principal_for_work
from llmgw.router.call import new_request_id
from llmgw.router.endpoint import Endpoint
from llmgw.router.handlers import Inside, serve
from llmgw.router.media import MEDIA_PURPOSES
from llmgw.router.plane import ClientPlane
from llmgw.store import Job, StoreError
from llmgw.tasks import cancel_and_wait, event_within

log = logging.getLogger("llmgw.jobs")

POLL = 1.0  # seconds between looks at the store for new and cancelled runs
PROGRESS_EVERY = 1.0  # seconds between a run's progress writes
SWEEP_EVERY = 3600.0  # seconds between deletions of what router.jobs.retain_days no longer keeps


def node_of(endpoint: Endpoint) -> str:
    """The machine an endpoint is on, as its address names it: one agent a machine, so one node."""
    return urlsplit(endpoint.url).hostname or endpoint.url


class JobRunner:
    def __init__(self, plane: ClientPlane, leading: Callable[[], bool]) -> None:
        self.plane = plane
        self.leading = leading
        self.keeper = FileKeeper(plane.store, plane.cfg.data_dir)
        self._task: asyncio.Task[None] | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._on: dict[str, Endpoint] = {}  # a run in flight's endpoint
        self._wake = asyncio.Event()
        self._swept = -SWEEP_EVERY
        self._principals: dict[str, tuple[float, Principal | None]] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="job runner")

    def wake(self) -> None:
        """A run was made on this control plane: look now rather than at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Runs in flight are dropped; they stay running in the store, and the next leader queues them again."""
        await cancel_and_wait(self._task, *self._runs.values())
        self._runs.clear()

    async def _watch(self) -> None:
        while True:
            try:
                if not self.leading() and self._runs:
                    # No longer the leader: the next one queues these runs again and runs them; this one's
                    # would only race it to the same rows.
                    for task in self._runs.values():
                        task.cancel()
                if self.leading():
                    await self.look()
                    if time.monotonic() - self._swept >= SWEEP_EVERY:
                        self._swept = time.monotonic()
                        await self.sweep(time.time())
            except StoreError as e:
                log.warning("jobs: the store did not answer (%s); looking again in %.0f s", e, POLL)
            self._wake.clear()
            await event_within(self._wake, POLL)

    async def look(self) -> None:
        store = self.plane.store
        jobs = await store.open_jobs()
        open_ids = {j.id for j in jobs}
        for run_id, task in list(self._runs.items()):
            if run_id not in open_ids:
                task.cancel()  # cancelled by its client (or deleted): the replica's work is not waited for
        settings = self.plane.settings.current.router.jobs
        per_endpoint = Counter(e.id for e in self._on.values())
        per_node = Counter(node_of(e) for e in self._on.values())
        for job in jobs:
            if job.id in self._runs:
                continue
            if job.status == "running":
                # Not this leader's: a lost leader's run, queued again to run from the start.
                if await store.move_job(job.id, ("running",), "queued", {"progress": {}, "replica": ""}):
                    log.info("jobs: run %s was running under a leader that is gone; queued again", job.id)
                continue
            entry = self.plane.router.registry.model(job.model)
            if entry is None:
                await store.move_job(job.id, ("queued",), "failed", {
                    "ended_at": time.time(), "error": {"code": "model_not_found",
                                                       "message": f"the model {job.model} is no longer here"}})
                continue
            free = [e for e in entry.usable() if e.breaker.available()
                    and per_endpoint[e.id] < settings.per_model and per_node[node_of(e)] < settings.per_node]
            if not free:
                if not entry.usable() and entry.on_demand:
                    # Asked again at each look while it waits: the ask lingers past each, so the load goes on.
                    with self.plane.router.demand.asking(entry.catalog or entry.name):
                        pass
                continue  # its replicas are busy (or loading): a later run of another model may go
            endpoint = min(free, key=lambda e: (per_endpoint[e.id], e.in_flight))
            if not await store.move_job(job.id, ("queued",), "running",
                                        {"started_at": time.time(), "replica": endpoint.id}):
                continue  # cancelled since the read
            per_endpoint[endpoint.id] += 1
            per_node[node_of(endpoint)] += 1
            self._on[job.id] = endpoint
            task = asyncio.create_task(self._run(job, endpoint), name=f"run {job.id}")
            self._runs[job.id] = task
            task.add_done_callback(functools.partial(self._ended, job.id))

    def _ended(self, run_id: str, task: asyncio.Task[None]) -> None:
        self._runs.pop(run_id, None)
        self._on.pop(run_id, None)
        self._wake.set()  # a replica is free: the next run of its model may go
        if not task.cancelled() and task.exception() is not None:
            log.error("jobs: run %s stopped by %r", run_id, task.exception())

    async def _run(self, job: Job, endpoint: Endpoint) -> None:
        store = self.plane.store
        who = await self._principal(job)
        refusal = "the key that made this run is gone" if who is None else who.refusal(time.time())
        if refusal is not None or who is None:
            await store.move_job(job.id, ("running",), "failed", {
                "ended_at": time.time(), "error": {"code": "invalid_api_key", "message": str(refusal)}})
            return
        request_id = new_request_id()
        await store.move_job(job.id, ("running",), "running", {"request_id": request_id})
        written = 0.0
        latest: dict[str, Any] = {}

        async def progress(p: Progress) -> None:
            nonlocal written
            latest.clear()
            latest.update(value=p.value, max=p.max, node=p.node, done_nodes=p.done_nodes, total_nodes=p.total_nodes)
            if time.monotonic() - written >= PROGRESS_EVERY:
                written = time.monotonic()
                await store.set_job_progress(job.id, dict(latest))

        band = lowest_band(self.plane.settings.current.router.admission)
        inside = Inside(body={"model": job.model, "inputs": job.inputs}, profile="batch", band=band,
                        on_progress=progress, pinned=endpoint.id)
        response = await serve(self.plane, WORKFLOWS, who, request_id, None, inside)
        raw = getattr(response, "body", None)
        try:
            body = orjson.loads(raw) if isinstance(raw, (bytes, bytearray)) else {}
        except orjson.JSONDecodeError:
            body = {}
        now = time.time()
        if response.status < 400:
            outputs = body.get("outputs") or []
            done = {**latest, "value": latest.get("max", 1) or 1} if latest else {}
            if not await store.move_job(job.id, ("running",), "succeeded",
                                        {"ended_at": now, "outputs": outputs, "progress": done}):
                await self._drop_outputs(outputs)  # cancelled while it ran: what it made goes with it
            return
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        await store.move_job(job.id, ("running",), "failed", {
            "ended_at": now, "error": {"code": str(error.get("code") or "run_failed"),
                                       "message": str(error.get("message") or f"the run failed ({response.status})")}})

    async def _drop_outputs(self, outputs: list[dict[str, Any]]) -> None:
        for o in outputs:
            file = await self.plane.store.file_by_id(str(o.get("file_id")))
            if file is not None:
                await self.keeper.delete(file)

    async def _principal(self, job: Job) -> Principal | None:
        if job.key_id is None:
            return None
        # A person's portal credential is a key in each of their projects, so what is held is per project.
        held_as = f"{job.key_id} {job.project_id}"
        held = self._principals.get(held_as)
        if held is not None and time.monotonic() - held[0] < PRINCIPAL_TTL:
            return held[1]
        who = await principal_for_work(self.plane, job.key_id, job.project_id)
        self._principals[held_as] = (time.monotonic(), who)
        return who

    async def sweep(self, now: float) -> tuple[int, int]:
        """Delete ended runs older than router.jobs.retain_days with the files they made, and the pictures and
        runs' files that old (a picture answered as a url, a picture a run was sent); (runs, files) deleted. A
        file an open run was given is kept until it ends."""
        days = self.plane.settings.current.router.jobs.retain_days
        if not days:
            return 0, 0
        store = self.plane.store
        before = now - days * 86400.0
        runs = 0
        while old := await store.old_jobs(before):
            for job in old:
                await self._drop_outputs(job.outputs)
                runs += await store.delete_job(job.id)
        given = {v for j in await store.open_jobs() for v in j.inputs.values() if isinstance(v, str)}
        files = 0
        # What is deleted leaves the next page; a page of files all in use ends it (they go once their runs end).
        while deletable := [f for f in await store.old_files(before, purposes=MEDIA_PURPOSES) if f.id not in given]:
            for file in deletable:
                files += await self.keeper.delete(file)
        if runs or files:
            log.info("jobs: deleted %d run(s) and %d file(s) older than %d days (router.jobs.retain_days)", runs,
                     files, days)
        return runs, files
