"""Each Hugging Face model's tokenizer, kept on every control plane for routing by cache (docs/routing.md).

The router cuts a prompt into the model's own tokens to find which replica holds it (router/prompttokens.py),
so every control plane needs the model's `tokenizer.json` and `tokenizer_config.json`: a few megabytes, from the
commit the model is pinned to, through the hub or the cluster's mirror as the pinning itself reads (the same
client, the same TLS). They are kept under DATA/tokenizers/ORG/REPO/COMMIT, checked against the sha256 Hugging
Face published where it published one (a file kept in LFS), and written whole or not at all.

Each control plane looks at the catalog every LOOK_EVERY seconds (5), so a model added on another one, or a standby
that becomes the leader, has its tokenizer soon without anyone asking. A model whose files cannot be read is
said once in the log and tried again next time; its requests are routed by the profile's other scorers meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from llmgw.control.catalog import Entry, ModelSpec
from llmgw.hub import Hub, HubError
from llmgw.store import CatalogStore, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.tokenizers")

FILES = ("tokenizer.json", "tokenizer_config.json")
# Past this a "tokenizer" is not one (the largest, Gemma's, is 33 MB): not read into memory.
MOST_BYTES = 64 << 20
# One read of the catalog a look, as the reconciler makes every 2 s: a model added is looked at within seconds.
LOOK_EVERY = 5.0


def hub_folder(root: Path, spec: ModelSpec) -> Path | None:
    """Where a Hugging Face model's tokenizer is kept here; None for a model with none on the hub."""
    origin = spec.origin
    if origin is None or not origin.repo or not origin.commit or FILES[0] not in origin.files:
        return None
    return root / origin.repo / origin.commit


class TokenizerKeeper:
    def __init__(self, root: Path, store: CatalogStore, hub: Callable[[], Hub], every: float = LOOK_EVERY) -> None:
        self.root = root
        self._store = store
        self._hub = hub
        self._every = every
        self._task: asyncio.Task[None] | None = None
        self._said: set[str] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tokenizers")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        store_said = False
        while True:
            try:
                await self.look()
                store_said = False
            except StoreError as e:
                # A store failing over is said in a sentence, once, by every part that reads it (the CI of
                # 2026-12-07: a stack here was the one in the server's log through a Patroni failover).
                if not store_said:
                    log.warning("tokenizers: the store did not answer (%s); looking again every %.0f s", e,
                                self._every)
                    store_said = True
            except Exception:  # the next look tries again; one failure must not end them
                log.exception("the models' tokenizers could not be looked at")
            await asyncio.sleep(self._every)

    async def look(self) -> None:
        """Fetch the tokenizer of each catalog model from Hugging Face that this control plane lacks."""
        for record in await self._store.list_models():
            try:
                spec = Entry.from_record(record).spec
            except Exception:  # noqa: BLE001 - the reconciler says what is wrong with a model's row
                continue
            folder = hub_folder(self.root, spec)
            if folder is None or spec.tokenizer or (folder / FILES[0]).exists():
                continue
            try:
                await self.fetch(spec, folder)
            except (HubError, OSError, ValueError) as e:
                if spec.name not in self._said:
                    self._said.add(spec.name)
                    log.warning("%s: its tokenizer could not be fetched (%s); routed without its cache until it "
                                "is", spec.name, e)
            else:
                self._said.discard(spec.name)
                log.info("%s: its tokenizer is kept in %s", spec.name, folder)

    async def fetch(self, spec: ModelSpec, folder: Path) -> None:
        origin = spec.origin
        assert origin is not None
        hub = self._hub()
        got: dict[str, bytes] = {}
        for name in FILES:
            described = origin.files.get(name)
            if described is None:
                continue
            if described.size > MOST_BYTES:
                raise ValueError(f"{name} is {described.size} bytes, more than a tokenizer")
            data = await hub.read(origin.repo, origin.commit, name, described.size or MOST_BYTES)
            if described.size and len(data) != described.size:
                raise ValueError(f"{name}: {len(data)} bytes read of {described.size}")
            if described.sha256 and hashlib.sha256(data).hexdigest() != described.sha256:
                raise ValueError(f"{name} does not match the sha256 Hugging Face published for it")
            got[name] = data
        await asyncio.to_thread(_write_whole, folder, got)


def _write_whole(folder: Path, files: dict[str, bytes]) -> None:
    """Every file, then tokenizer.json last, each renamed into place: a folder with tokenizer.json is whole."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(files, key=lambda n: n == FILES[0]):
        part = folder / f".{name}.part"
        part.write_bytes(files[name])
        os.replace(part, folder / name)
