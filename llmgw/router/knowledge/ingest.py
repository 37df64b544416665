"""A file added to a knowledge base: read, cut into passages, embedded as its key, and kept (docs/knowledge.md).

Each file is a task of the control plane that was asked to add it. Its
passages and its status `completed` are written in one transaction, and
only while it is still in progress (Store.finish_kb_file): a file removed
meanwhile leaves nothing behind. A control plane that stops mid-way leaves
the file in progress; the leader carries such files on after RESUME_AFTER
seconds without news (resume), and deletes the changes no index will read
again (KEEP_CHANGES).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from llmgw.account import Principal, principal_of
from llmgw.kb import Chunking, KbIndex, Unreadable, cut, given_passages, pack, pages_of
from llmgw.router.batches import FileKeeper
from llmgw.router.knowledge.embed import EmbedFailed, embed_import
from llmgw.router.plane import ClientPlane
from llmgw.store import PASSAGES_SUFFIX, KbFile, NewPassage, StoreError, shown_name
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.kb")

GUARD_REFUSED = "guardrail_blocked"  # the code of a request the guardrails refused
EMBED_GROUP = 32  # passages a request: an engine batches them, and one refusal costs one request's worth
MAX_PASSAGES = 20000  # in one file: a 4,000,000-token document at the default size; past it, cut the file
RESUME_EVERY = 30.0
RESUME_AFTER = 120.0  # seconds in progress with no task here before the leader takes a file on
# How long the leader keeps kb_changes: far longer than any control plane follows behind (a second), and a
# control plane that starts loads each base whole, so older changes are read by no one.
KEEP_CHANGES = 86400.0


class Ingester:
    def __init__(self, plane: ClientPlane, index: KbIndex) -> None:
        self.plane, self.index = plane, index
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._resumer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._resumer = asyncio.create_task(self._resume(), name="kb-resume")

    async def stop(self) -> None:
        tasks = [t for t in (self._resumer, *self._tasks.values()) if t is not None]
        for task in tasks:
            await cancel_and_wait(task)

    def begin(self, file: KbFile) -> None:
        key = (file.vector_store_id, file.file_id)
        if key in self._tasks:
            return
        task = asyncio.create_task(self._ingest(file), name=f"kb-ingest-{file.file_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    def working_on(self, vector_store_id: str, file_id: str) -> bool:
        return (vector_store_id, file_id) in self._tasks

    async def _ingest(self, file: KbFile) -> None:
        store = self.plane.store
        try:
            made = await self._passages(file)
            if made is None:
                return
            passages, skipped = made
            if skipped:
                log.info("knowledge base %s: %d passages of %s were refused by the guardrails and left out",
                         file.vector_store_id, len(skipped), file.file_id)
            if await store.finish_kb_file(file.vector_store_id, file.file_id, passages, skipped):
                await self.index.catch_up()
        except _Failed as failed:
            await store.fail_kb_file(file.vector_store_id, file.file_id, "failed", failed.code, failed.message)
        except StoreError as e:
            # Left in progress: the leader carries it on when the store answers (resume).
            log.warning("knowledge base %s: %s was not recorded, the store did not answer (%s); it is tried again "
                        "within %.0f s", file.vector_store_id, file.file_id, e, RESUME_AFTER + RESUME_EVERY)

    async def _passages(self, file: KbFile) -> tuple[list[NewPassage], list[dict[str, Any]]] | None:
        """The file's passages with their vectors, and those the guardrails refused (None: its base is gone)."""
        store = self.plane.store
        vs = await store.vector_store(file.vector_store_id)
        if vs is None:
            return None
        principal = await self._principal(file.key_id)
        stored = await store.file_by_id(file.file_id)
        if stored is None:
            raise _Failed("file_not_found", f"{file.file_id} was deleted from /v1/files before it was read")
        content = await FileKeeper(store, self.plane.cfg.data_dir).read(stored)
        if content is None:
            raise _Failed("file_not_found", f"the bytes of {file.file_id} are not on this control plane's disk; "
                                            "upload it again")
        shown = shown_name(stored.filename)
        try:
            if stored.filename.endswith(PASSAGES_SUFFIX):  # cut by llmgw-kb where the document is
                given = given_passages(shown, content)
            else:
                # PDF and Office documents uploaded as they are: read in a thread, since pypdf takes seconds of
                # CPU over a long PDF and this process answers /v1 meanwhile. llmgw-kb reads them on the
                # person's machine instead, and sends only passages.
                chunking = Chunking(file.chunk_tokens, file.chunk_overlap)
                pages = await asyncio.to_thread(pages_of, stored.filename, content)
                given = [(page, t) for page, text in pages for t in cut(text, chunking)]
        except Unreadable as e:
            raise _Failed(e.code, str(e)) from None
        texts = [t for _, t in given]
        if not texts:
            raise _Failed("empty_file", f"{shown} holds no words to search")
        if len(texts) > MAX_PASSAGES:
            raise _Failed("file_too_large", f"{shown} makes {len(texts)} passages, more than the "
                                            f"{MAX_PASSAGES} one file may; split it")
        kept: list[NewPassage] = []
        skipped: list[dict[str, Any]] = []
        for start in range(0, len(texts), EMBED_GROUP):
            group = list(enumerate(texts[start:start + EMBED_GROUP], start))
            vectors: list[list[float] | None] = []
            try:
                vectors += await embed_import(self.plane, principal, vs.embedding_model, [t for _, t in group])
            except EmbedFailed as e:
                if e.code != GUARD_REFUSED:
                    raise _Failed(e.code, f"{shown}, passages {start + 1}-{start + len(group)}: "
                                          f"{e.message}") from None
                # One at a time, to leave out only the passages the guardrails refuse, and say which.
                for number, text in group:
                    try:
                        vectors += await embed_import(self.plane, principal, vs.embedding_model, [text])
                    except EmbedFailed as one:
                        if one.code != GUARD_REFUSED:
                            raise _Failed(one.code, f"{shown}, passage {number + 1}: {one.message}") from None
                        vectors.append(None)
                        skipped.append({"passage": number + 1, "page": given[number][0], "code": one.code,
                                        "message": one.message})
            kept += [NewPassage(n, text, pack(v)) for (n, text), v in zip(group, vectors, strict=True) if v is not None]
        if not kept:
            raise _Failed(GUARD_REFUSED, f"{shown}: the guardrails refused every passage "
                                         f"({skipped[0]['message']})")
        return kept, skipped

    async def _principal(self, key_id: str | None) -> Principal:
        key = None if key_id is None else await self.plane.store.key_by_id(key_id)
        principal = None if key is None else await principal_of(self.plane.store, key)
        if principal is None:
            raise _Failed("invalid_api_key", "the key that added this file is gone; add it again with a key")
        refusal = principal.refusal(time.time())
        if refusal is not None:
            raise _Failed("invalid_api_key", f"the key that added this file is refused: {refusal}")
        return principal

    async def _resume(self) -> None:
        while True:
            await asyncio.sleep(RESUME_EVERY)
            if not self.plane.lease.leading:
                continue
            try:
                waiting = await self.plane.store.kb_files_in_progress()
                await self.plane.store.prune_kb_changes(time.time() - KEEP_CHANGES)
            except StoreError:
                continue
            now = time.time()
            for file in waiting:
                if now - file.created_at >= RESUME_AFTER and not self.working_on(file.vector_store_id, file.file_id):
                    self.begin(file)


class _Failed(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message
