"""Bringing a file into the mirror: from the hub, a peer or an address, resumed, checked, then listed.

Every path in checks the same way. The bytes go to a part file beside where the file will be; its sha256 is
worked out and compared with the one published for it (Hugging Face's for an LFS file, the peer's list, the
administrator's `--sha256`); a copy that differs is deleted and the error names both sums. Only then is the file
renamed into place and listed. A file Hugging Face's scan marks unsafe is refused before a byte is fetched.

One fetch a file however many ask for it (the control planes' wanted list, `mirror add`, a node waiting): each
asker waits on the same task. Progress is kept per file for the page and for the nodes that wait.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import aiohttp

from llmgw.hub import (
    Attempts,
    ChecksumMismatch,
    Counter,
    TokenFileError,
    WeightsError,
    bearer,
    discard,
    download_part,
    finish,
    part_path,
    redact,
    sha256_file,
)
from llmgw.mirror.holdings import FileKey, Held, Holdings

log = logging.getLogger("llmgw.mirror")

UNSAFE = "unsafe"


class Refused(WeightsError):
    """A file the mirror will not keep (the scan marks it unsafe), before anything is fetched."""


@dataclass
class Progress:
    done: int = 0
    total: int = 0
    phase: str = "fetching"
    """fetching, checking, failed."""
    error: str = ""
    since: float = 0.0
    scan: str = ""
    """Hugging Face's scan of the file, as it was given to fetch it: a refused unsafe file is listed as such."""

    def as_dict(self) -> dict[str, object]:
        return {"done": self.done, "total": self.total, "phase": self.phase, "error": self.error}


@dataclass(frozen=True)
class Wanting:
    """A file to bring in, and what it must be."""

    key: FileKey
    url: str
    """Where its bytes are."""
    sha256: str
    """What they must hash to; "" only for a small git file Hugging Face publishes no sha256 for."""
    size: int = 0
    scan: str = ""
    origin: str = ""
    """Said in the list: the hub, the peer, the address (without a query)."""
    headers: tuple[tuple[str, str], ...] = ()
    ssl: ssl.SSLContext | None = None


class Fetcher:
    """The mirror's fetches, `at_once` at a time."""

    def __init__(self, holdings: Holdings, *, at_once: int = 2, attempts: Attempts | None = None,
                 on_change: Callable[[], None] | None = None, clock: Callable[[], float] = time.time):
        self.holdings = holdings
        self.progress: dict[str, Progress] = {}
        self.attempts = attempts or Attempts()
        self._gate = asyncio.Semaphore(at_once)
        self._tasks: dict[str, asyncio.Task[Held]] = {}
        self._on_change = on_change or (lambda: None)
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No total timeout: a 60 GB file takes as long as it takes; a stalled read is cut by sock_read.
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30,
                                                                                sock_read=120))
        return self._session

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def busy(self, key: FileKey) -> bool:
        return str(key) in self._tasks

    async def cancel(self, key: FileKey) -> None:
        """Stop the fetch of `key`, if one is under way (its part stays, for a later fetch to carry on from)."""
        task = self._tasks.get(str(key))
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def start(self, wanting: Wanting) -> asyncio.Task[Held]:
        """The fetch of `wanting.key`: the one already under way, or a new one."""
        name = str(wanting.key)
        task = self._tasks.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._fetch(wanting))
            self._tasks[name] = task
            task.add_done_callback(lambda _t: self._tasks.pop(name, None))
        return task

    async def _fetch(self, wanting: Wanting) -> Held:
        name = str(wanting.key)
        progress = self.progress[name] = Progress(total=wanting.size, since=self._clock(), scan=wanting.scan)
        try:
            if wanting.scan.lower() == UNSAFE:
                raise Refused(f"Hugging Face's scan marks {name} unsafe; the mirror does not keep it. Use another "
                              "file of the model (its safetensors or GGUF)")
            async with self._gate:
                held = await self._bring(wanting, progress)
        except asyncio.CancelledError:
            progress.phase, progress.error = "failed", "stopped before it was whole; the next start carries on"
            raise
        except (WeightsError, OSError) as e:
            # `since` the failure, not the start: a failed fetch is tried again a while after it failed.
            progress.phase, progress.error, progress.since = "failed", str(e), self._clock()
            log.warning("%s", e)
            self._on_change()
            raise
        del self.progress[name]
        self._on_change()
        return held

    async def _bring(self, wanting: Wanting, progress: Progress) -> Held:
        target = self.holdings.path_of(wanting.key)
        shown = f"{wanting.key} from {redact(wanting.origin or wanting.url)}"

        def on_bytes(done: int, total: int) -> None:
            progress.done, progress.total = done, total or progress.total

        session = self.session()
        if wanting.ssl is not None:
            # A peer's address: the session above dials with the system's authorities, a peer with the cluster's.
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=wanting.ssl),
                                             timeout=session.timeout) as peer_session:
                size = await self._download(peer_session, wanting, target, shown, on_bytes)
        else:
            size = await self._download(session, wanting, target, shown, on_bytes)
        progress.phase, progress.done = "checking", 0
        counter = Counter()
        part = part_path(target)

        async def ticking() -> None:
            while True:
                progress.done = counter.value
                await asyncio.sleep(0.5)

        ticker = asyncio.get_running_loop().create_task(ticking())
        try:
            got = await asyncio.to_thread(sha256_file, part, counter)
        finally:
            ticker.cancel()
        if wanting.sha256 and got != wanting.sha256:
            discard(target)
            raise ChecksumMismatch(f"{shown} is not the file that was pinned: its sha256 is {got}, and "
                                   f"{wanting.sha256} was published for it; the copy was deleted",
                                   source=str(wanting.key), got=got, want=wanting.sha256)
        await asyncio.to_thread(finish, target)
        held = Held(wanting.key.repo, wanting.key.commit, wanting.key.path, size, got, wanting.scan,
                    redact(wanting.origin or wanting.url), self._clock())
        self.holdings.add(held)
        await asyncio.to_thread(self.holdings.write, self.holdings.snapshot())
        log.info("kept %s (%d bytes, sha256 %s)", shown, size, got)
        return held

    async def _download(self, session: aiohttp.ClientSession, wanting: Wanting, target: Path, shown: str,
                        on_bytes: Callable[[int, int], None]) -> int:
        return await download_part(session, wanting.url, target, source=shown, headers=dict(wanting.headers),
                                       advice=_advice, on_bytes=on_bytes, attempts=self.attempts)


def _advice(status: int) -> str:
    if status in (401, 403):
        return ("the repository is gated or private and the hub refused the mirror's token; accept its terms with "
                "the token's account, or give the mirror a token that may read it (hub_token_file in mirror.yaml)")
    if status == 404:
        return "there is no such file at that commit; check the repository, the file and the commit"
    return "try again later, or check the address"


def hub_url(endpoint: str, key: FileKey) -> str:
    """A file's resolve address on a hub (Hugging Face's, or a mirror's: it serves the same path)."""
    return f"{endpoint.rstrip('/')}/{key.repo}/resolve/{key.commit}/{quote(key.path, safe='/')}"


def hub_headers(token_file: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(bearer(token_file, "hub_token_file").items())
    except TokenFileError as e:
        raise WeightsError(str(e)) from None
