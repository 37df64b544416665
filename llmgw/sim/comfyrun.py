"""The ComfyUI stand-in's queue and executor: one prompt at a time, its messages in ComfyUI's order.

For the client whose id came with the prompt, as main.py's prompt_worker and
execution.PromptExecutor send them:

    status (queue_remaining, to every socket, whenever the queue changes)
    execution_start {prompt_id, timestamp}
    execution_cached {nodes, prompt_id, timestamp}
    for each node run: executing {node, display_node, prompt_id},
        progress {value, max, prompt_id, node} once per sampler step,
        executed {node, display_node, output, prompt_id} for a node with pictures
    execution_success {prompt_id, timestamp}
        (or execution_error / execution_interrupted, and nothing more run)
    status, once the history holds the prompt
    executing {node: null, prompt_id}

A node whose inputs (with its upstream nodes', recursively) are those of a
node already run is not run again: its outputs are taken from the cache and
it is listed in execution_cached, as ComfyUI's cache does. So the same graph
with the same seed a second time makes no new picture and sends no progress:
its output nodes send `executed` with the pictures of the first run.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from llmgw.sim.comfynodes import NODES, Exec, Folders, Interrupted, NodeFailed

# ComfyUI keeps this many prompts' history (execution.MAXIMUM_HISTORY_SIZE).
MOST_HISTORY = 10000
# The binary frame of a preview: event PREVIEW_IMAGE (1), then the picture's format (2: PNG), then the picture.
_PREVIEW = struct.pack(">II", 1, 2)

Send = Callable[[str, Any, "str | None"], Awaitable[None]]


@dataclass
class Item:
    number: float
    prompt_id: str
    prompt: dict[str, Any]
    extra_data: dict[str, Any]
    outputs: list[str]

    def listed(self) -> list[Any]:
        """As ComfyUI's /queue and /history show a queue item: [number, prompt_id, prompt, extra_data, outputs]."""
        return [self.number, self.prompt_id, self.prompt, self.extra_data, self.outputs]


def _shown(value: Any) -> Any:
    """execution.format_value: what an error message shows of a value."""
    return value if value is None or isinstance(value, int | float | bool | str) else str(value)


class Runner:
    def __init__(self, folders: Folders, send: Send, *, step_seconds: float, fail_word: str | None, previews: bool):
        self.folders = folders
        self.send = send
        self.step_seconds = step_seconds
        self.fail_word = fail_word
        self.previews = previews
        self.pending: list[tuple[float, int, Item]] = []
        self.running: Item | None = None
        self.history: dict[str, dict[str, Any]] = {}
        self.client_id: str | None = None
        self.last_node_id: str | None = None
        self._order = 0
        self._wake = asyncio.Event()
        self._interrupt = False
        # signature -> (outputs, ui): outputs of nodes already run, kept while a prompt still uses them.
        self._cache: dict[str, tuple[tuple[Any, ...], dict[str, Any] | None]] = {}

    # -- the queue, as /prompt, /queue and /interrupt see it

    def remaining(self) -> int:
        return len(self.pending) + (1 if self.running else 0)

    def queue_info(self) -> dict[str, Any]:
        return {"exec_info": {"queue_remaining": self.remaining()}}

    async def queue_updated(self) -> None:
        await self.send("status", {"status": self.queue_info()}, None)

    async def put(self, item: Item) -> None:
        self._order += 1
        heapq.heappush(self.pending, (item.number, self._order, item))
        self._wake.set()
        await self.queue_updated()

    def current(self) -> tuple[list[Any], list[Any]]:
        running = [self.running.listed()] if self.running else []
        return running, [item.listed() for _, _, item in sorted(self.pending)]

    async def delete(self, prompt_id: str) -> None:
        kept = [entry for entry in self.pending if entry[2].prompt_id != prompt_id]
        if len(kept) != len(self.pending):
            self.pending = kept
            heapq.heapify(self.pending)
            await self.queue_updated()

    async def wipe(self) -> None:
        self.pending = []
        await self.queue_updated()

    def interrupt(self, prompt_id: str | None = None) -> None:
        """POST /interrupt: stop the running prompt, or only the one named, if it is the one running."""
        if self.running is not None and (prompt_id is None or self.running.prompt_id == prompt_id):
            self._interrupt = True

    # -- the worker

    async def work(self) -> None:
        """main.py's prompt_worker: take the first prompt of the queue, run it, file it in the history; forever."""
        while True:
            while not self.pending:
                self._wake.clear()
                await self._wake.wait()
            _, _, item = heapq.heappop(self.pending)
            self.running = item
            await self.queue_updated()
            try:
                entry = await self._execute(item)
            finally:
                self.running = None
                self.last_node_id = None
            if len(self.history) >= MOST_HISTORY:
                self.history.pop(next(iter(self.history)))
            self.history[item.prompt_id] = entry
            await self.queue_updated()
            if self.client_id is not None:
                await self.send("executing", {"node": None, "prompt_id": item.prompt_id}, self.client_id)

    def _signatures(self, prompt: dict[str, Any]) -> dict[str, str]:
        """Each node's input signature: its class, its inputs with links replaced by their node's signature."""
        found: dict[str, str] = {}

        def sign(node_id: str) -> str:
            if node_id not in found:
                node = prompt[node_id]
                cls = NODES[node["class_type"]]
                inputs = {k: (["link", sign(v[0]), v[1]] if isinstance(v, list) else v)
                          for k, v in sorted(node["inputs"].items())}
                changed = cls.changed(self.folders, node["inputs"]) if cls.changed else ""
                found[node_id] = json.dumps([node["class_type"], inputs, changed], sort_keys=True, default=str)
            return found[node_id]

        for node_id in prompt:
            try:
                sign(node_id)
            except (KeyError, IndexError, TypeError, RecursionError):
                pass  # not reached from a valid output: never run
        return found

    def _order_of(self, item: Item, cached: set[str]) -> list[str]:
        """The nodes to run, in ComfyUI's classic order: the output needing fewest runs first, inputs before."""
        prompt = item.prompt

        def needs(node_id: str, seen: list[str]) -> list[str]:
            if node_id in seen or node_id in cached:
                return seen
            for value in prompt[node_id]["inputs"].values():
                if isinstance(value, list):
                    needs(value[0], seen)
            if node_id not in seen:
                seen.append(node_id)
            return seen

        order: list[str] = []
        for out in sorted(item.outputs, key=lambda o: (len(needs(o, [])), o)):
            for node_id in needs(out, []):
                if node_id not in order:
                    order.append(node_id)
        return order

    async def _execute(self, item: Item) -> dict[str, Any]:
        self._interrupt = False
        pid, prompt = item.prompt_id, item.prompt
        client = item.extra_data.get("client_id")
        self.client_id = client if isinstance(client, str) else None
        messages: list[list[Any]] = []

        async def add(event: str, data: dict[str, Any], broadcast: bool = False) -> None:
            data = {**data, "timestamp": int(time.time() * 1000)}
            messages.append([event, data])
            if self.client_id is not None or broadcast:
                await self.send(event, data, self.client_id)

        async def to_client(event: str, data: Any) -> None:
            if self.client_id is not None:
                await self.send(event, data, self.client_id)

        async def progress(node: str, value: int, most: int, preview: bytes | None) -> None:
            await to_client("progress", {"value": value, "max": most, "prompt_id": pid, "node": node})
            if preview is not None:
                await to_client("preview", _PREVIEW + preview)

        await add("execution_start", {"prompt_id": pid})
        signatures = self._signatures(prompt)
        used = set(signatures.values())
        self._cache = {k: v for k, v in self._cache.items() if k in used}
        cached = {n for n, s in signatures.items() if s in self._cache}
        await add("execution_cached", {"nodes": [n for n in prompt if n in cached], "prompt_id": pid})

        ex = Exec(pid, prompt, item.extra_data, self.folders, self.step_seconds, self.fail_word, self.previews,
                  progress, lambda: self._interrupt)
        results: dict[str, tuple[Any, ...]] = {}
        ui: dict[str, dict[str, Any]] = {}
        executed: list[str] = []
        for node_id in [o for o in item.outputs if o in cached]:
            # A cached output node still tells its client what it holds (execution.execute's cached branch).
            outputs, shown = self._cache[signatures[node_id]]
            if shown:
                ui[node_id] = shown
            await to_client("executed", {"node": node_id, "display_node": node_id, "output": shown, "prompt_id": pid})
        for node_id in cached:
            outputs, shown = self._cache[signatures[node_id]]
            results[node_id] = outputs
            if shown:
                ui[node_id] = shown
        success = True
        for node_id in self._order_of(item, cached):
            node = prompt[node_id]
            cls = NODES[node["class_type"]]
            inputs = {k: (results[v[0]][v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
            try:
                if self._interrupt:
                    raise Interrupted()
                self.last_node_id = node_id
                await to_client("executing", {"node": node_id, "display_node": node_id, "prompt_id": pid})
                await self._state(pid, node_id, "running")
                outputs, shown = await cls.run(ex, node_id, inputs)
            except Interrupted:
                await add("execution_interrupted", {"prompt_id": pid, "node_id": node_id, "node_type": cls.name,
                                                    "executed": list(executed)}, broadcast=True)
                success = False
                break
            except Exception as e:  # noqa: BLE001 - any node's exception is the prompt's execution_error, as in ComfyUI
                kind = e.kind if isinstance(e, NodeFailed) else type(e).__qualname__
                await add("execution_error", {
                    "prompt_id": pid, "node_id": node_id, "node_type": cls.name, "executed": list(executed),
                    "exception_message": str(e), "exception_type": kind,
                    "traceback": [f'  File "nodes.py", in {cls.name}\n'],
                    "current_inputs": {k: [_shown(v)] for k, v in inputs.items()},
                    "current_outputs": {n: [[_shown(v)] for v in out] for n, out in results.items()},
                })
                success = False
                break
            results[node_id] = outputs
            self._cache[signatures[node_id]] = (outputs, shown)
            executed.append(node_id)
            await self._state(pid, node_id, "finished")
            if shown:
                ui[node_id] = shown
                await to_client("executed", {"node": node_id, "display_node": node_id, "output": shown,
                                             "prompt_id": pid})
        if success:
            await add("execution_success", {"prompt_id": pid})
        return {
            "prompt": item.listed(),
            "outputs": ui,
            "status": {"status_str": "success" if success else "error", "completed": success, "messages": messages},
            "meta": {n: {"node_id": n, "display_node": n, "parent_node": None, "real_node_id": n} for n in ui},
        }

    async def _state(self, pid: str, node_id: str, state: str) -> None:
        """progress_state, which ComfyUI since 0.3.4x sends beside the older messages; clients may ignore it."""
        if self.client_id is None:
            return
        await self.send("progress_state", {"prompt_id": pid, "nodes": {node_id: {
            "value": 1 if state == "finished" else 0, "max": 1, "state": state, "node_id": node_id,
            "prompt_id": pid, "display_node_id": node_id, "parent_node_id": None, "real_node_id": node_id}}},
            self.client_id)
