"""The cluster's model mirrors as a control plane sees them (the `mirror` settings: url and peers).

Every `mirror.read_every` (10 s) each control plane reads each mirror's list (what it holds, fetches, failed), which
the admin page shows and which orders the mirrors a node is given. The leader also tells each mirror the
catalog's pins (every file of every model pinned from Hugging Face, with the models using it), so that a model
added is fetched into the mirrors by itself, and a file a model loads cannot be removed from under it.

A StartShard names the mirrors to fetch from, the first to try first: those that answered the last read, and
among them one that holds the file. With no mirror set, it names none, and the node fetches as it always has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from llmgw.config import HubSettings, MirrorSettings
from llmgw.control.catalog.spec import load_spec
from llmgw.hub import Hub, SourceError, parse_source
from llmgw.mirror import MirrorClient, MirrorError
from llmgw.protocol import EngineProfile
from llmgw.store import CatalogStore, StoreError

log = logging.getLogger("llmgw.mirrors")



@dataclass
class Seen:
    """One mirror at its last read."""

    url: str
    ok: bool | None = None
    at: float = 0.0
    since: float = 0.0
    """When it began to answer, or stopped: the last change of `ok`."""
    error: str = ""
    files: list[dict[str, Any]] = field(default_factory=list)

    def holds(self, key: str) -> bool:
        return any(f.get("key") == key and f.get("state") == "held" for f in self.files)


async def wanted_files(store: CatalogStore) -> list[dict[str, Any]]:
    """Every file the catalog's pinned models load, once each, with the models that use it."""
    files: dict[str, dict[str, Any]] = {}
    for record in await store.list_models():
        try:
            spec = load_spec(record.spec, record.name)
        except ValueError:
            continue
        origin = spec.origin
        if origin is None or not origin.commit or not origin.repo:
            continue
        for path, f in origin.files.items():
            key = f"{origin.repo}/{origin.commit}/{path}"
            row = files.setdefault(key, {"repo": origin.repo, "commit": origin.commit, "path": path, "size": f.size,
                                         "sha256": f.sha256, "scan": f.scan, "models": []})
            row["models"].append(spec.name)
    return [files[k] for k in sorted(files)]


def file_key(source: str) -> str:
    """ORG/REPO/COMMIT/PATH of a pinned hf: source; "" for any other."""
    try:
        hf = parse_source(source)
    except SourceError:
        return ""
    if not hf.pinned or not hf.path:
        return ""
    return f"{hf.repo_id}/{hf.revision}/{hf.path}"


def hub_client(hub: HubSettings, mirrors: MirrorSettings, ssl_context: ssl.SSLContext | None) -> Hub:
    """The hub a control plane pins through (hub.endpoint): Hugging Face's, or one of the cluster's mirrors, which
    answers for what it holds (an air-gapped site, docs/mirror.md) and is dialed with this control plane's
    certificate, as the mirrors are."""
    endpoint = hub.endpoint.rstrip("/")
    if ssl_context is None or endpoint not in mirrors.addresses:
        return Hub(hub.endpoint, hub.token_file)
    timeout = aiohttp.ClientTimeout(total=30)
    return Hub(hub.endpoint, "", session=lambda: aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ssl_context), timeout=timeout))


class MirrorKeeper:
    def __init__(self, store: CatalogStore, settings: Callable[[], MirrorSettings],
                 ssl_context: Callable[[], ssl.SSLContext | None], leading: Callable[[], bool],
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.settings = settings
        self.ssl_context = ssl_context
        self.leading = leading
        self.clock = clock
        self.seen: dict[str, Seen] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="mirrors")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.read_all()
            except Exception:
                log.exception("reading the model mirrors failed")
            await asyncio.sleep(float(self.settings().read_every))

    async def read_all(self) -> None:
        addresses = self.settings().addresses
        self.seen = {url: self.seen.get(url) or Seen(url) for url in addresses}
        if not addresses:
            return
        context = self.ssl_context()
        wanted: list[dict[str, Any]] | None = None
        if self.leading():
            try:
                wanted = await wanted_files(self.store)
            except StoreError as e:
                log.debug("the catalog's pins not read: %s", e)
        # One mirror fetches from the hub, the first in order that answered the last read (the first named, before
        # any answered); the others copy from it as they keep in step. One that stops answering hands it on.
        fetcher = next((url for url in addresses if self.seen[url].ok), addresses[0])
        await asyncio.gather(*(self._read(self.seen[url], context, wanted, url == fetcher) for url in addresses))

    async def _read(self, seen: Seen, context: ssl.SSLContext | None, wanted: list[dict[str, Any]] | None,
                    from_hub: bool = True) -> None:
        client = MirrorClient(seen.url, context, timeout=10)
        try:
            if context is None:
                raise MirrorError("this control plane has no certificate yet (its agent port is shut)", 503)
            if wanted is not None:
                await client.want(wanted, from_hub)
            listing = await client.files()
        except MirrorError as e:
            if seen.ok is not False:
                log.warning("the model mirror at %s: %s", seen.url, e)
                seen.since = self.clock()
            seen.ok, seen.at, seen.error = False, self.clock(), str(e)
            return
        if seen.ok is False:
            log.info("the model mirror at %s answers again", seen.url)
        if seen.ok is not True:
            seen.since = self.clock()
        seen.ok, seen.at, seen.error = True, self.clock(), ""
        seen.files = list(listing.get("files") or [])

    def for_start(self, profile: EngineProfile) -> list[str]:
        """The mirrors a node is told to fetch `profile`'s weights from, the first to try first; [] for none."""
        addresses = self.settings().addresses
        if not addresses or not profile.source.lower().startswith("hf:"):
            return []
        key = file_key(profile.source)
        order = {url: i for i, url in enumerate(addresses)}

        def rank(url: str) -> tuple[int, int, int]:
            seen = self.seen.get(url)
            answered = seen is not None and seen.ok is True
            return (0 if answered else 1, 0 if seen is not None and key and seen.holds(key) else 1, order[url])
        return sorted(addresses, key=rank)

    def view(self) -> dict[str, Any]:
        """For the admin page and `ctl`: each mirror's state, and every file with where it is held."""
        files: dict[str, dict[str, Any]] = {}
        for seen in self.seen.values():
            for f in seen.files:
                row = files.setdefault(f["key"], {**f, "mirrors": {}})
                row["mirrors"][seen.url] = {"state": f.get("state"), "progress": f.get("progress")}
                if f.get("state") == "held":
                    row.update({k: f[k] for k in ("size", "sha256", "scan", "origin") if k in f})
        return {"mirrors": [{"url": s.url, "ok": s.ok, "at": s.at, "since": s.since, "error": s.error,
                             "held": sum(1 for f in s.files if f.get("state") == "held")}
                            for s in self.seen.values()],
                "files": [files[k] for k in sorted(files)]}
