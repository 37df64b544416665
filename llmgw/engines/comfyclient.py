"""ComfyUI's client: run one workflow on a ComfyUI and get its output files back.

    client = ComfyClient(session, "http://10.0.0.7:8188")
    name = await client.upload_image(png, "cat.png")        # for LoadImage's "image"
    outputs = await client.run(graph, on_progress=show, timeout=300)
    # [Output(node="9", filename="ComfyUI_00001_.png", subfolder="", kind="images", data=b"\\x89PNG…"), …]

A run follows ComfyUI's own protocol. The websocket is opened first, with a
client id of the run's own, and the prompt posted with that id after: ComfyUI
sends a prompt's messages only to the socket of the client id it came with,
and sends them once, so a socket opened later misses the start. The run ends
on execution_success, or on `executing` with node null for its prompt (what
ComfyUI before execution_success sent, and still sends last); then the
history names the output files and /view serves each. Without a websocket
(a proxy that refuses the upgrade), the history is polled every half second.

What a run raises is a ComfyError with the status the gateway answers with:
400 for a graph or input ComfyUI refused, 502 for a ComfyUI that failed,
was interrupted or went away, 504 for one that did not finish in time. A
run that times out or is cancelled takes its prompt off ComfyUI's queue, or
interrupts it if it is the one running, so that an abandoned picture does not
hold the card for the next.

A graph's text inputs are people's prompts: nothing here logs the graph or
the messages that quote it (execution_error's current_inputs).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import mimetypes
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from llmgw.connecterror import connect_failure
from llmgw.errors import ExpectedError

log = logging.getLogger(__name__)

# How often the history is asked for a prompt's end when there is no websocket.
POLL_SECONDS = 0.5
# A websocket frame can be a preview picture; ComfyUI's own limit on what it takes is its upload size.
MOST_FRAME = 100 * 1024 * 1024
# A run given up on (timed out, cancelled) is taken off ComfyUI's queue within this long, or left.
ABANDON_SECONDS = 5.0
# A sentence quotes this much of an exception's message, its first line.
MOST_QUOTED = 300


@dataclass(frozen=True)
class Output:
    node: str  # the output node's id
    filename: str
    subfolder: str
    kind: str  # "images" (ComfyUI's output key: images, gifs, 3d, …)
    data: bytes


@dataclass(frozen=True)
class Progress:
    value: int  # steps done of the current sampler node
    max: int
    node: str | None  # the node executing now
    done_nodes: int  # nodes finished so far
    total_nodes: int


class ComfyError(ExpectedError):
    """Refused or failed: .status (HTTP status for our client to give: 400 a bad graph/inputs, 502 ComfyUI failed
    or cut, 504 timed out), .message (a sentence a person can act on, naming the node and its class where ComfyUI
    says), .node_errors (dict, may be empty), .ran (the workflow ran and a node of it failed: ComfyUI did its part,
    and the workflow or its inputs were at fault, not the replica)."""

    def __init__(self, status: int, message: str, node_errors: dict[str, Any] | None = None, *, ran: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.node_errors = node_errors or {}
        self.ran = ran


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _quote(text: Any) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= MOST_QUOTED else line[:MOST_QUOTED] + "…"


def _reason(error: dict[str, Any]) -> str:
    """One of ComfyUI's validation errors ({type, message, details, extra_info}) as a clause."""
    extra = _dict(error.get("extra_info"))
    message, details = _quote(error.get("message", "")), _quote(error.get("details", ""))
    if error.get("type") in ("exception_during_inner_validation", "exception_during_validation") \
            and extra.get("exception_type") == "KeyError":
        # ComfyUI follows a link before checking it: a link to a node the graph lacks is a KeyError of its id.
        return f"an input links to node {details or '?'}, which the workflow does not have"
    return f"{message}: {details}" if details else message


def refusal_sentence(body: Any) -> tuple[str, dict[str, Any]]:
    """POST /prompt's 400 body ({"error", "node_errors"}) as one sentence, and the node_errors."""
    if not isinstance(body, dict):
        return "ComfyUI refused the workflow and said nothing more", {}
    node_errors = _dict(body.get("node_errors"))
    clauses = []
    for node_id, entry in node_errors.items():
        if not isinstance(entry, dict):
            continue
        reasons = [_reason(e) for e in entry.get("errors") or [] if isinstance(e, dict)]
        clauses.append(f"node {node_id} ({entry.get('class_type', '?')}): {'; '.join(reasons) or 'invalid'}")
    if clauses:
        return "ComfyUI refused the workflow: " + "; ".join(clauses), node_errors
    error = body.get("error")
    if isinstance(error, dict):
        extra = _dict(error.get("extra_info"))
        said = _reason(error)
        if extra.get("node_id") is not None and error.get("type") == "missing_node_type":
            said = f"node {extra['node_id']} ({extra.get('class_type')}): {_quote(error.get('message', ''))}"
        if error.get("type") == "prompt_no_outputs":
            said += " (it needs an output node, such as SaveImage)"
        return f"ComfyUI refused the workflow: {said}", node_errors
    return f"ComfyUI refused the workflow: {_quote(error) or 'no reason given'}", node_errors


def failure_sentence(event: str, data: dict[str, Any]) -> str:
    """execution_error or execution_interrupted as a sentence naming the node and its class."""
    where = f"node {data.get('node_id', '?')} ({data.get('node_type', '?')})"
    if event == "execution_interrupted":
        return f"ComfyUI's run of the workflow was interrupted at {where}"
    kind = data.get("exception_type") or "an error"
    return f"ComfyUI failed at {where}: {kind}: {_quote(data.get('exception_message', ''))}"


def _holds(queue: Any, part: str, prompt_id: str) -> bool:
    """Whether /queue's `part` (queue_running, queue_pending) holds the prompt: items are [number, prompt_id, …]."""
    items = queue.get(part) if isinstance(queue, dict) else None
    return any(isinstance(item, list) and len(item) > 1 and item[1] == prompt_id for item in items or [])


async def _call(callback: Callable[[Progress], Awaitable[None] | None] | None, progress: Progress) -> None:
    if callback is None:
        return
    result = callback(progress)
    if inspect.isawaitable(result):
        await result


class _Follow:
    """What the messages of one prompt have said so far."""

    def __init__(self, prompt_id: str, total: int):
        self.prompt_id = prompt_id
        self.total = total
        self.started = False
        self.finished = False
        self.done: set[str] = set()
        self.node: str | None = None
        self.value = 0
        self.most = 0

    def progress(self) -> Progress:
        return Progress(self.value, self.most, self.node, min(len(self.done), self.total), self.total)


class ComfyClient:
    def __init__(self, session: aiohttp.ClientSession, base_url: str):
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3].rstrip("/")
        self.session = session
        self.base_url = base

    # -- plain requests

    def _cannot_reach(self, what: str, e: BaseException) -> ComfyError:
        why = connect_failure(e) if isinstance(e, aiohttp.ClientConnectorError) else (str(e) or type(e).__name__)
        return ComfyError(502, f"ComfyUI at {self.base_url} did not answer {what}: {why}")

    async def _get_json(self, path: str) -> Any:
        try:
            async with self.session.get(self.base_url + path) as r:
                if r.status != 200:
                    raise ComfyError(502, f"ComfyUI at {self.base_url} answered GET {path} with {r.status}")
                return await r.json(content_type=None)
        except (aiohttp.ClientError, ValueError) as e:
            raise self._cannot_reach(f"GET {path}", e) from None

    async def upload_image(self, data: bytes, filename: str) -> str:
        """POST /upload/image; the name to put in LoadImage's "image" (with its subfolder, if ComfyUI gave one)."""
        form = aiohttp.FormData()
        form.add_field("image", data, filename=filename,
                       content_type=mimetypes.guess_type(filename)[0] or "application/octet-stream")
        try:
            async with self.session.post(self.base_url + "/upload/image", data=form) as r:
                if r.status == 413:
                    raise ComfyError(400, f"ComfyUI at {self.base_url} refused the picture {filename!r} as too "
                                          "large (its --max-upload-size)")
                if 400 <= r.status < 500:
                    raise ComfyError(400, f"ComfyUI at {self.base_url} refused the picture {filename!r} "
                                          f"({r.status}); is its name a plain file name?")
                if r.status != 200:
                    raise ComfyError(502, f"ComfyUI at {self.base_url} answered the upload of {filename!r} "
                                          f"with {r.status}")
                body = await r.json(content_type=None)
        except (aiohttp.ClientError, ValueError) as e:
            raise self._cannot_reach(f"the upload of {filename!r}", e) from None
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise ComfyError(502, f"ComfyUI at {self.base_url} answered the upload of {filename!r} without a name")
        subfolder = body.get("subfolder") or ""
        return f"{subfolder}/{body['name']}" if subfolder else body["name"]

    async def interrupt(self) -> None:
        """POST /interrupt: stop whatever ComfyUI is running now, whoever's it is."""
        await self._post("/interrupt", {})

    async def _post(self, path: str, body: dict[str, Any]) -> None:
        try:
            async with self.session.post(self.base_url + path, json=body) as r:
                if r.status != 200:
                    raise ComfyError(502, f"ComfyUI at {self.base_url} answered POST {path} with {r.status}")
        except aiohttp.ClientError as e:
            raise self._cannot_reach(f"POST {path}", e) from None

    # -- a run

    async def run(self, graph: dict[str, Any], *,
                  on_progress: Callable[[Progress], Awaitable[None] | None] | None = None,
                  timeout: float = 600.0) -> list[Output]:
        """Run `graph` (ComfyUI's API format) and return every file its output nodes made, in node order."""
        client_id = uuid.uuid4().hex
        follow = _Follow("", len(graph) if isinstance(graph, dict) else 0)
        try:
            async with asyncio.timeout(timeout):
                try:
                    return await self._run(graph, client_id, follow, on_progress)
                except TimeoutError:
                    # Not the run's own limit (that cancels the body and turns into TimeoutError only as the
                    # block ends): a socket's timeout of the session.
                    raise ComfyError(502, f"ComfyUI at {self.base_url} stopped answering mid-run") from None
        except TimeoutError:
            taken = await self._abandon(follow)
            raise ComfyError(504, f"ComfyUI at {self.base_url} did not finish the workflow in {timeout:g} s"
                                  + ("; it was taken off ComfyUI's queue" if taken else "")) from None
        except asyncio.CancelledError:
            await asyncio.shield(self._abandon(follow))
            raise

    async def _run(self, graph: dict[str, Any], client_id: str, follow: _Follow,
                   on_progress: Callable[[Progress], Awaitable[None] | None] | None) -> list[Output]:
        ws = await self._open(client_id)
        try:
            follow.prompt_id = await self._queue(graph, client_id)
            followed = ws is not None and await self._follow(ws, follow, on_progress)
            if not followed:
                if ws is not None:
                    # A socket that closes mid-run is a ComfyUI gone (then the history cannot be asked either, and
                    # that is the error) or a proxy that cut an idle socket (then the history tells the end).
                    log.info("comfyui: the websocket of %s closed mid-run; asking its history", self.base_url)
                await self._poll(follow)
        finally:
            if ws is not None:
                await ws.close()
        outputs = await self._fetch(await self._history(follow))
        await self._forget(follow.prompt_id)
        return outputs

    async def _forget(self, prompt_id: str) -> None:
        """Take the run out of ComfyUI's history, which keeps the workflow with a person's prompt in it for as
        long as ComfyUI runs: llmgw has what it needs of it. A ComfyUI that will not is left as it is."""
        try:
            async with self.session.post(self.base_url + "/history", json={"delete": [prompt_id]}) as r:
                await r.read()
        except (aiohttp.ClientError, OSError) as e:
            log.info("comfyui: %s did not forget run %s (%s)", self.base_url, prompt_id, type(e).__name__)

    async def _open(self, client_id: str) -> aiohttp.ClientWebSocketResponse | None:
        try:
            return await self.session.ws_connect(f"{self.base_url}/ws?clientId={client_id}", max_msg_size=MOST_FRAME,
                                                 heartbeat=30)
        except (aiohttp.ClientError, OSError) as e:
            log.info("comfyui: no websocket at %s (%s); polling its history", self.base_url, type(e).__name__)
            return None

    async def _queue(self, graph: dict[str, Any], client_id: str) -> str:
        try:
            async with self.session.post(self.base_url + "/prompt",
                                         json={"prompt": graph, "client_id": client_id}) as r:
                try:
                    body = await r.json(content_type=None)
                except ValueError:
                    body = None
                status = r.status
        except aiohttp.ClientError as e:
            raise self._cannot_reach("the workflow", e) from None
        if status == 400:
            sentence, node_errors = refusal_sentence(body)
            raise ComfyError(400, sentence, node_errors)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("prompt_id"), str):
            raise ComfyError(502, f"ComfyUI at {self.base_url} answered the workflow with {status} and no prompt id")
        skipped = _dict(body.get("node_errors"))
        if skipped:
            # ComfyUI runs the output nodes that passed its check and leaves the others out, with a 200.
            log.warning("comfyui: %s runs the workflow without the outputs of nodes it refused: %s", self.base_url,
                        ", ".join(f"{n} ({_dict(e).get('class_type')})" for n, e in skipped.items()))
        return str(body["prompt_id"])

    async def _follow(self, ws: aiohttp.ClientWebSocketResponse, follow: _Follow,
                      on_progress: Callable[[Progress], Awaitable[None] | None] | None) -> bool:
        """Read the prompt's messages to its end: True; False if the socket closed first."""
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue  # binary frames are previews; nothing here shows them
            try:
                said = json.loads(msg.data)
            except ValueError:
                continue
            if not isinstance(said, dict) or not isinstance(said.get("data"), dict):
                continue
            event, data = said.get("type"), said["data"]
            if data.get("prompt_id") != follow.prompt_id:
                continue  # another prompt's, or status
            if event == "execution_start":
                follow.started = True
            elif event == "execution_cached":
                follow.done.update(str(n) for n in data.get("nodes") or [])
                await _call(on_progress, follow.progress())
            elif event == "executing":
                node = data.get("node")
                if follow.node is not None:
                    follow.done.add(follow.node)
                if node is None:
                    follow.finished = True
                    return True
                follow.started = True
                follow.node, follow.value, follow.most = str(node), 0, 0
                await _call(on_progress, follow.progress())
            elif event == "progress":
                follow.node = str(data.get("node") or follow.node)
                follow.value, follow.most = int(data.get("value") or 0), int(data.get("max") or 0)
                await _call(on_progress, follow.progress())
            elif event == "executed":
                follow.done.add(str(data.get("node")))
                await _call(on_progress, follow.progress())
            elif event == "execution_success":
                if follow.node is not None:
                    follow.done.add(follow.node)
                follow.finished = True
                return True
            elif event in ("execution_error", "execution_interrupted"):
                follow.finished = True  # nothing of it left to take off the queue
                raise ComfyError(502, failure_sentence(event, data), ran=True)
        return False

    async def _poll(self, follow: _Follow) -> None:
        """Without a websocket: ask the history until it holds the prompt, and the queue whether it still has it."""
        while True:
            found = await self._get_json(f"/history/{follow.prompt_id}")
            if isinstance(found, dict) and follow.prompt_id in found:
                follow.finished = True
                return
            queue = await self._get_json("/queue")
            running, pending = (_holds(queue, part, follow.prompt_id) for part in ("queue_running", "queue_pending"))
            follow.started = follow.started or running
            found = await self._get_json(f"/history/{follow.prompt_id}")  # it may have ended between the two
            if isinstance(found, dict) and follow.prompt_id in found:
                follow.finished = True
                return
            if not (running or pending):
                raise ComfyError(502, f"ComfyUI at {self.base_url} no longer has the workflow in its queue or "
                                      "history; was it restarted?")
            await asyncio.sleep(POLL_SECONDS)

    async def _history(self, follow: _Follow) -> dict[str, Any]:
        """The prompt's history entry. ComfyUI files it just after execution_success, so it is asked again a
        little later when not there yet; an entry whose status is an error raises that error."""
        while True:
            found = await self._get_json(f"/history/{follow.prompt_id}")
            entry = found.get(follow.prompt_id) if isinstance(found, dict) else None
            if isinstance(entry, dict):
                break
            await asyncio.sleep(0.1)  # between execution_success and the history's entry: a moment
        status = _dict(entry.get("status"))
        if status.get("status_str") == "error":
            for event, data in status.get("messages") or []:
                if event in ("execution_error", "execution_interrupted") and isinstance(data, dict):
                    follow.finished = True
                    raise ComfyError(502, failure_sentence(event, data), ran=True)
            raise ComfyError(502, f"ComfyUI at {self.base_url} ended the workflow with an error it did not describe",
                             ran=True)
        return entry

    async def _fetch(self, entry: dict[str, Any]) -> list[Output]:
        found: list[Output] = []
        outputs = _dict(entry.get("outputs"))
        for node, held in outputs.items():
            if not isinstance(held, dict):
                continue
            for kind, files in held.items():
                for f in files if isinstance(files, list) else []:
                    if isinstance(f, dict) and isinstance(f.get("filename"), str):
                        found.append(await self._view(str(node), kind, f))
        return found

    async def _view(self, node: str, kind: str, f: dict[str, Any]) -> Output:
        params = {"filename": f["filename"], "subfolder": str(f.get("subfolder") or ""),
                  "type": str(f.get("type") or "output")}
        try:
            async with self.session.get(self.base_url + "/view", params=params) as r:
                if r.status != 200:
                    raise ComfyError(502, f"ComfyUI at {self.base_url} answered /view of {f['filename']!r} "
                                          f"with {r.status}")
                data = await r.read()
        except aiohttp.ClientError as e:
            raise self._cannot_reach(f"/view of {f['filename']!r}", e) from None
        return Output(node, f["filename"], params["subfolder"], kind, data)

    async def _abandon(self, follow: _Follow) -> bool:
        """Take a prompt this run gives up on off the queue, or interrupt it if it is the one running.

        The interrupt names the prompt: a ComfyUI that knows the field stops only that prompt, and this is sent
        only once the prompt was seen to start, so an older ComfyUI that stops whatever runs stops this one.
        """
        if not follow.prompt_id or follow.finished:
            return False
        try:
            async with asyncio.timeout(ABANDON_SECONDS):
                await self._post("/queue", {"delete": [follow.prompt_id]})
                if follow.started:
                    await self._post("/interrupt", {"prompt_id": follow.prompt_id})
        except (ComfyError, TimeoutError):
            log.info("comfyui: could not take an abandoned workflow off %s", self.base_url)
            return False
        return True
