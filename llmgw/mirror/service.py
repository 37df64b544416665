"""The mirror's work, whatever asks for it: the control planes' wanted list, `llmgw mirror add` and `remove`, the
page's list, and what a peer reads.

    mirror = Mirror(cfg, peer_ssl)
    await mirror.start()                      # fetches what is wanted and missing, reads the peers
    keys = await mirror.add("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    mirror.remove(FileKey.parse("Qwen/…/COMMIT/file.gguf"))
    await mirror.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmgw.config import MirrorConfig
from llmgw.engines import is_pickle
from llmgw.hub import Hub, HubError, SourceError, WeightsError, parse_source, redact
from llmgw.mirror.fetching import Fetcher, Progress, Wanting, hub_headers, hub_url
from llmgw.mirror.holdings import BadKey, FileKey, Holdings, Wanted, check_sha256

log = logging.getLogger("llmgw.mirror")

# A wanted file whose fetch failed is tried again after this long, not at every turn of the loop.
RETRY_FAILED_S = 60.0
KEEP_INTERVAL_S = 2.0


class MirrorError(Exception):
    """Something asked of the mirror that it will not do, in a sentence that says what to do; `status` is the HTTP
    status its API answers with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Mirror:
    def __init__(self, cfg: MirrorConfig, peer_ssl: ssl.SSLContext | None = None,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.peer_ssl = peer_ssl
        self.clock = clock
        self.holdings = Holdings(Path(cfg.dir), clock)
        self.fetcher = Fetcher(self.holdings, at_once=cfg.fetch_at_once, clock=clock)
        self.peers: dict[str, dict[str, Any]] = {p.rstrip("/"): {"ok": None, "at": 0.0, "error": ""}
                                                 for p in cfg.peers}
        self._wake = asyncio.Event()
        # Until a leader says otherwise (set_wanted), a mirror fetches what it is asked to keep.
        self.from_hub = True
        self._tasks: list[asyncio.Task[None]] = []
        self._stepping = False

    # running

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._keep_loop()))
        if self.peers:
            self._keep_in_step()

    def _keep_in_step(self) -> None:
        from llmgw.mirror.peers import keep_in_step

        self._stepping = True
        self._tasks.append(asyncio.get_running_loop().create_task(keep_in_step(self)))

    def set_peers(self, peers: list[str]) -> bool:
        """Keep in step with `peers` from now on (mirror.yaml's, read again); whether they changed. What is known
        of a peer already named is kept."""
        wanted = [p.rstrip("/") for p in peers]
        if wanted == list(self.peers):
            return False
        self.peers = {p: self.peers.get(p) or {"ok": None, "at": 0.0, "error": ""} for p in wanted}
        if self.peers and not self._stepping:
            self._keep_in_step()
        return True

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # A fetch that ended as the mirror stopped had its file in place and listed, but its write of the list
        # cancelled: restarted, the mirror knew one file of two and copied the other again (CI). The list as it
        # stands is written last; an older write still in a thread cannot go over it (Holdings.write).
        await asyncio.to_thread(self.holdings.write, self.holdings.snapshot())
        await self.fetcher.close()

    def wake(self) -> None:
        self._wake.set()

    @functools.cached_property
    def own_identity(self) -> tuple[str, str] | None:
        """Who the certificate this mirror serves with names (pki.identity); None when it cannot be read."""
        from llmgw.trust import certificate_identity

        return certificate_identity(self.cfg.tls_files()[0])

    async def _keep_loop(self) -> None:
        """Fetch what the control planes want and the mirror lacks, each once, a failed one again after a while."""
        while True:
            now = self.clock()
            # A mirror the leader did not choose to fetch copies from the one it did (peers.py).
            for wanted in self.holdings.missing() if self.from_hub else []:
                name = str(wanted.key)
                failed = self.fetcher.progress.get(name)
                if self.fetcher.busy(wanted.key) or (failed and failed.phase == "failed"
                                                     and now - failed.since < RETRY_FAILED_S):
                    continue
                try:
                    wanting = self._from_hub(wanted)
                except WeightsError as e:  # the token file cannot be read: said on the file's row, tried again
                    self.fetcher.progress[name] = Progress(phase="failed", error=str(e), since=now, scan=wanted.scan)
                    continue
                task = self.fetcher.start(wanting)
                task.add_done_callback(_quiet)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), KEEP_INTERVAL_S)

    def _from_hub(self, wanted: Wanted) -> Wanting:
        return Wanting(wanted.key, hub_url(self.cfg.hub_endpoint, wanted.key), wanted.sha256, wanted.size,
                       wanted.scan, origin=self.cfg.hub_endpoint, headers=hub_headers(self.cfg.hub_token_file))

    # what the control planes want

    def set_wanted(self, rows: list[dict[str, Any]], from_hub: bool = True) -> int:
        """Replace the wanted list with the catalog's pins; how many are missing.

        `from_hub`: whether this mirror fetches what it lacks from the hub, or leaves that to the mirror the
        leader chose (the first that answers) and copies it from that one as it keeps in step: the cluster
        fetches a new model from Hugging Face once, not once a mirror."""
        self.from_hub = from_hub
        wanted = []
        for i, row in enumerate(rows):
            try:
                sha = row.get("sha256") or ""
                wanted.append(Wanted(repo=str(row["repo"]), commit=str(row["commit"]), path=str(row["path"]),
                                     size=int(row.get("size") or 0), sha256=check_sha256(sha) if sha else "",
                                     scan=str(row.get("scan") or ""),
                                     models=sorted(str(m) for m in row.get("models") or [])))
                wanted[-1].key  # noqa: B018 - refuses a name that is not one
            except (KeyError, TypeError, ValueError) as e:
                raise MirrorError(f"files[{i}] is not a pinned file ({e})") from None
        # The leader sends the whole list every read (10 s): written only when it changed.
        if {str(w.key): w for w in wanted} != self.holdings.wanted:
            self.holdings.set_wanted(wanted)
            self.holdings.save()
        self.wake()
        return len(self.holdings.missing())

    # llmgw mirror add / remove

    async def add(self, source: str, sha256: str = "") -> list[FileKey]:
        """Pin `source` (hf:org/repo[/file][@revision], or an address with `sha256`) and fetch it; the keys added.
        Waits until every file is here and checked."""
        if source.lower().startswith("hf:"):
            wanting = await self._pin(source)
        elif source.lower().startswith(("https://", "http://")):
            wanting = [self._from_address(source, sha256)]
        else:
            raise MirrorError(f"{redact(source)} is neither hf:org/repo/file nor an https:// address")
        tasks = [self.fetcher.start(w) for w in wanting]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise MirrorError("; ".join(str(e) for e in failed), 502)
        return [w.key for w in wanting]

    async def _pin(self, source: str) -> list[Wanting]:
        try:
            hf = parse_source(source)
        except SourceError as e:
            raise MirrorError(str(e)) from None
        try:
            info = await Hub(self.cfg.hub_endpoint, self.cfg.hub_token_file).repo(hf.repo_id, hf.revision)
        except HubError as e:
            raise MirrorError(str(e), e.status) from None
        if hf.path:
            if hf.path not in info.files:
                raise MirrorError(f"{hf.repo_id} has no file {hf.path} at {info.commit[:12]}", 404)
            files = [info.files[hf.path]]
        else:
            # A whole repository: every file but those in a pickle format, which run code when loaded.
            files = [f for f in info.files.values() if not is_pickle(f.path)]
        return [Wanting(FileKey(hf.repo_id, info.commit, f.path), hub_url(self.cfg.hub_endpoint,
                                                                          FileKey(hf.repo_id, info.commit, f.path)),
                        f.sha256, f.size, f.scan, origin=self.cfg.hub_endpoint,
                        headers=hub_headers(self.cfg.hub_token_file)) for f in files]

    def _from_address(self, url: str, sha256: str) -> Wanting:
        if not sha256:
            raise MirrorError(f"{redact(url)} is not on Hugging Face, so nothing publishes its checksum: give it "
                              "with --sha256 (as sha256sum prints it)")
        try:
            sha = check_sha256(sha256)
            parts = urlsplit(url)
            name = os.path.basename(parts.path) or "file"
            # Kept as url/HOST at its checksum's first 40 digits: the same bytes, the same place.
            key = FileKey(f"url/{(parts.hostname or 'host').replace(':', '_')}", sha[:40], name)
        except (BadKey, ValueError) as e:
            raise MirrorError(f"{redact(url)}: {e}") from None
        return Wanting(key, url, sha, origin=url)

    def remove(self, key: FileKey) -> None:
        users = self.holdings.users(key)
        if users:
            raise MirrorError(f"{key} is what {', '.join(users)} load{'s' if len(users) == 1 else ''}; remove "
                              f"{'that model' if len(users) == 1 else 'those models'} from the catalog first "
                              "(llmgw ctl model remove)", 409)
        failed = self.fetcher.progress.get(str(key))
        if self.holdings.get(key) is None and not self.fetcher.busy(key) and failed is None:
            raise MirrorError(f"the mirror holds no {key}; `llmgw mirror list` says what it holds", 404)
        self.holdings.remove(key)
        self.holdings.save()
        self.fetcher.progress.pop(str(key), None)

    def match(self, text: str) -> list[FileKey]:
        """The held files `text` names: a whole key, or ORG/REPO[/COMMIT] for all of them."""
        text = text.strip("/")
        names = [*self.holdings.held, *(n for n, p in self.fetcher.progress.items() if p.phase == "failed")]
        found = [FileKey.parse(n) for n in dict.fromkeys(names) if n == text or n.startswith(text + "/")]
        if not found:
            raise MirrorError(f"the mirror holds nothing under {text}; `llmgw mirror list` says what it holds", 404)
        return sorted(found, key=str)

    # what the page, the CLI and the peers read

    def listing(self) -> dict[str, Any]:
        rows = []
        for name, held in sorted(self.holdings.held.items()):
            rows.append({"key": name, "repo": held.repo, "commit": held.commit, "path": held.path,
                         "size": held.size, "sha256": held.sha256, "scan": held.scan, "origin": held.origin,
                         "added_at": held.added_at, "models": self.holdings.users(held.key), "state": "held"})
        for wanted in self.holdings.missing():
            name = str(wanted.key)
            progress = self.fetcher.progress.get(name, Progress(phase="waiting"))
            rows.append({"key": name, "repo": wanted.repo, "commit": wanted.commit, "path": wanted.path,
                         "size": wanted.size, "sha256": wanted.sha256, "scan": wanted.scan, "origin": "",
                         "added_at": 0, "models": wanted.models, "state": progress.phase,
                         "progress": progress.as_dict()})
        for name, progress in sorted(self.fetcher.progress.items()):
            if name not in self.holdings.held and name not in self.holdings.wanted:
                key = FileKey.parse(name)
                rows.append({"key": name, "repo": key.repo, "commit": key.commit, "path": key.path,
                             "size": progress.total, "sha256": "", "scan": progress.scan, "origin": "", "added_at": 0,
                             "models": [], "state": progress.phase, "progress": progress.as_dict()})
        return {"files": rows, "used_bytes": self.holdings.used_bytes(), "peers": self.peers}

    def state(self) -> dict[str, Any]:
        """What a peer reads to keep in step: what is held (with its sum) and what was removed, and when."""
        return {"held": [{"key": name, "size": h.size, "sha256": h.sha256, "scan": h.scan, "added_at": h.added_at}
                         for name, h in sorted(self.holdings.held.items())],
                "removed": dict(self.holdings.removed)}

    def waiting(self, key: FileKey) -> Progress | None:
        """How far the mirror is with a file it is bringing in (for a node asking for it), or None."""
        if str(key) not in self.holdings.wanted and not self.fetcher.busy(key):
            return None
        return self.fetcher.progress.get(str(key), Progress(phase="waiting"))


def _quiet(task: asyncio.Task[Any]) -> None:
    # A failed fetch is in the progress list and the log already; the task's exception is not news.
    if not task.cancelled():
        task.exception()


__all__ = ["Mirror", "MirrorError", "WeightsError"]
