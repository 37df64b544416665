"""The node's weights cache: each source fetched once, checked, and kept until no model uses it.

    weights = Weights("/var/cache/llmgw/weights", hf_token_file="/etc/llmgw/hf-token")
    path = await weights.fetch_profile(start.profile, on_progress=report)
    ...
    freed = await weights.remove(msg.sources, in_use=[s.profile.source for s in running])

Invariants the rest leans on:

- A file under its own name in the cache is whole, and when the catalog
  gave a sha256 for it, checked: bytes arrive in a hidden `.NAME.part`
  and are renamed only after that. An engine is never handed half a model.
- Every shard waiting on one source waits on one fetch: four replicas
  placed on a node's four cards at once each wrote the same `.part` files
  in the original, and three failed renaming a file another had renamed.
- Nothing outside the cache directory is written or deleted: a path made
  from a source is refused if any part of it would step out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from llmgw.agent.weights import default_sources
from llmgw.agent.weights.errors import ChecksumMismatch, FetchFailed, UnsafeName, WeightsError, redact, refuse_pickle
from llmgw.agent.weights.progress import CHECKING, Broadcast, ProgressCallback
from llmgw.agent.weights.sources import Fetcher, HfFetcher, MirroredHfFetcher, MirrorFetcher, PathFetcher, is_hub_id
from llmgw.config import WeightsSettings
from llmgw.engines import is_pickle
from llmgw.hub import (
    MIRROR_PHASE,
    Attempts,
    Counter,
    check_room,
    discard,
    download_part,
    finish,
    keep,
    kept_path,
    meta_path,
    part_path,
    read_kept,
    sha256_many,
    size_of,
)
from llmgw.protocol import EngineProfile

log = logging.getLogger("llmgw.agent.weights")
# A model mirror that cannot be reached is given up for the next after this: the next one may well answer.
_NEXT_MIRROR = Attempts(tries=2, delays=(0.5, 1.0))

# The cache's own files beside the weights; a name from a source may not be one of them.
_OWN_SUFFIXES = (".part", ".part.json", ".sha256", ".sha256.tmp")


@dataclass
class Removed:
    """What remove() did: each source deleted, with the bytes that freed, and each left, with why."""

    freed_bytes: int = 0
    removed: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)


@dataclass
class _Flight:
    task: asyncio.Task
    broadcast: Broadcast
    waiters: int = 0


@dataclass
class _File:
    name: str  # as the set names it; "" for a single file
    url: str
    target: Path
    want: str
    size: int = 0


class Weights:
    """Fetches, checks and removes the weights of the models on this node, under one cache directory."""

    def __init__(
        self,
        cache_dir: str | os.PathLike,
        *,
        hf_endpoint: str = "https://huggingface.co",
        hf_token_file: str = "",
        mirror_url: str = "",
        mirror_ssl: ssl.SSLContext | None = None,
        fetchers: Iterable[Fetcher] | None = None,
        progress_interval: float = 0.5,
        check_at_once: int = 4,
        attempts: Attempts | None = None,
    ):
        self.cache_dir = Path(cache_dir)
        self.fetchers: list[Fetcher] = list(fetchers) if fetchers is not None else default_sources.shipped(
            WeightsSettings(hf_endpoint=hf_endpoint, hf_token_file=hf_token_file, mirror=mirror_url))
        # agent.yaml's weights.mirror, for a StartShard that names none: hf: sources then come from it too.
        self.mirrors = [mirror_url] if mirror_url else []
        self.mirror_ssl = mirror_ssl
        self.progress_interval = progress_interval
        self.check_at_once = check_at_once
        self.attempts = attempts or Attempts()
        self._flights: dict[Path, _Flight] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        for flight in list(self._flights.values()):
            flight.task.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- what the agent calls -------------------------------------------------------------------

    async def fetch_profile(self, profile: EngineProfile, on_progress: ProgressCallback | None = None,
                            mirrors: Sequence[str] = ()) -> str:
        """fetch() for a StartShard's profile; "" for an engine that needs no weights (sim)."""
        if not profile.source:
            return ""
        return await self.fetch(profile.source, sha256=profile.sha256, files=profile.files,
                                allow_pickle=profile.allow_pickle, on_progress=on_progress, mirrors=mirrors)

    async def fetch(
        self,
        source: str,
        *,
        sha256: str = "",
        files: Mapping[str, str] | None = None,
        allow_pickle: bool = False,
        on_progress: ProgressCallback | None = None,
        mirrors: Sequence[str] = (),
    ) -> str:
        """Where the engine finds the weights of `source` on this node, fetched and checked if need be.

        A single file's path; a set's directory when `files` (relative name
        → sha256) is given and `source` is its base; a local path as it is;
        a bare hub id (org/model) unchanged, for an engine that downloads it
        itself. Raises WeightsError (a sentence) when they cannot be had.

        `mirrors` (the StartShard's, else agent.yaml's weights.mirror): an hf:
        source is fetched from these model mirrors, never from Hugging Face.
        """
        source = source.strip()
        if not source:
            raise WeightsError("the model names no source for its weights; "
                               "give it a path, an http(s)://, hf: or mirror: source")
        want = _sum(sha256, source)
        files = {name: _sum(w, f"{source} {name}") for name, w in (files or {}).items()}
        # Before anything is asked of any server.
        if not allow_pickle:
            if is_pickle(source):
                raise refuse_pickle(source)
            for name in files:
                if is_pickle(name):
                    raise refuse_pickle(source, name)
        fetcher = self._fetcher(source)
        mirrored = list(mirrors) or self.mirrors
        if mirrored and isinstance(fetcher, HfFetcher):
            fetcher = MirroredHfFetcher(mirrored, self.mirror_ssl)
        elif mirrored and isinstance(fetcher, MirrorFetcher):
            fetcher = fetcher.at(mirrored, self.mirror_ssl)
        if fetcher is None:
            if is_hub_id(source) and not files:
                return source
            raise WeightsError(
                f"{redact(source)} is not a source the node knows: give an absolute path, an http(s):// "
                "address, hf:org/repo/file[@revision], or mirror:org/repo/commit/file"
            )
        if isinstance(fetcher, PathFetcher):
            return await self._local(fetcher, source, want, files, on_progress)
        target = self._place(fetcher.cache_parts(source))
        if files:
            items = [_File(name, fetcher.url(source, name), self._place_in(target, name, source), w)
                     for name, w in files.items()]
        else:
            if source.endswith("/"):
                raise WeightsError(f"{redact(source)} is a directory; a set of files needs their names (files:)")
            items = [_File("", fetcher.url(source), target, want)]
        try:
            # Joining another's fetch, then looking again: what it fetched may
            # have been checked against another sum than this caller's.
            while True:
                if self._ready(source, items):
                    return str(target)
                joined = self._flights.get(target)
                flight = self._start(target, source, fetcher, items) if joined is None else joined
                await self._wait(flight, on_progress)
                if joined is None:  # this caller's own fetch, checked against its own sums
                    return str(target)
        except OSError as e:
            raise WeightsError(
                f"the weights of {redact(source)} could not be written under {self.cache_dir} "
                f"({e.strerror or e}); check that the disk is mounted and the agent may write there"
            ) from None

    async def remove(self, sources: Iterable[str], in_use: Iterable[str]) -> Removed:
        """Delete the cached copies of `sources` that none of `in_use` needs (RemoveWeights).

        Only copies in the cache directory are deleted: a local path is the
        operator's, and a source being fetched or one a model still uses is
        left, with the reason.
        """
        result = Removed()
        used: list[Path] = []
        for s in in_use:
            if place := self._cached_place(s):
                used.append(place)
        for source in sources:
            try:
                fetcher = self._fetcher(source)
                if fetcher is None or fetcher.local:
                    result.left[source] = ("not a copy in the cache (a local path, or an id the engine fetches "
                                           "itself); nothing deleted")
                    continue
                target = self._place(fetcher.cache_parts(source))
            except WeightsError as e:
                result.left[source] = str(e)
                continue
            if any(target == u or target in u.parents or u in target.parents for u in used):
                result.left[source] = "a model on this node still uses it"
                continue
            if any(target == f or target in f.parents or f in target.parents for f in self._flights):
                result.left[source] = "it is being fetched for a shard"
                continue
            freed = await asyncio.to_thread(self._delete, target)
            if freed is None:
                result.left[source] = "nothing of it is in the cache"
                continue
            result.freed_bytes += freed
            result.removed.append(source)
            log.info("removed cached weights no model uses: %s (%d bytes)", redact(source), freed)
        return result

    def cached_path(self, source: str) -> str:
        """Where a source's copy is (or would be) in the cache; "" for one that is not kept there."""
        place = self._cached_place(source)
        return str(place) if place else ""

    # --- where things go ------------------------------------------------------------------------

    def _fetcher(self, source: str) -> Fetcher | None:
        return next((f for f in self.fetchers if f.claims(source)), None)

    def _cached_place(self, source: str) -> Path | None:
        try:
            fetcher = self._fetcher(source.strip())
            if fetcher is None or fetcher.local:
                return None
            return self._place(fetcher.cache_parts(source.strip()))
        except WeightsError:
            return None

    def _root(self) -> Path:
        return Path(os.path.realpath(self.cache_dir))

    def _place(self, parts: list[str]) -> Path:
        """The cache path for a source's components, refused if any would lead out of the cache."""
        for part in parts:
            _check_component(part, what=f"the source's part {part!r}")
        return self._inside(self.cache_dir.joinpath(*parts), "/".join(parts))

    def _place_in(self, directory: Path, name: str, source: str) -> Path:
        """A set's file `name` within its directory, refused if it would land elsewhere."""
        if not name or name.startswith("/") or "\\" in name or "\0" in name or (len(name) > 1 and name[1] == ":"):
            raise UnsafeName(f"the set at {redact(source)} names a file {name!r}, which is not a name within it; "
                             "refused, nothing was fetched")
        for part in name.split("/"):
            try:
                _check_component(part, what=f"{name!r}")
            except UnsafeName:
                raise UnsafeName(f"the set at {redact(source)} names a file {name!r}, which would land outside "
                                 "its directory; refused, nothing was fetched") from None
        return self._inside(directory / name, name)

    def _inside(self, path: Path, shown: str) -> Path:
        # realpath follows any link already in the cache: a directory linked
        # elsewhere is as much a way out as "..".
        root = self._root()
        real = Path(os.path.realpath(path))
        if real != root and root not in real.parents:
            raise UnsafeName(f"{shown} would be kept outside the cache directory {self.cache_dir}; refused")
        return path

    # --- fetching -------------------------------------------------------------------------------

    def _ready(self, source: str, items: list[_File]) -> bool:
        """Whether every file is here and, where a sum is given, known to be it — without reading any."""
        ready = True
        for item in items:
            if not item.target.is_file():
                ready = False
                continue
            if not item.want:
                continue
            kept = read_kept(item.target)
            if not kept:
                ready = False
            elif kept != item.want:
                # Checked when it was fetched, against another sum: the same
                # address gave these bytes, and another model may use them.
                raise ChecksumMismatch(
                    f"the copy of {_shown(source, item)} on this node has sha256 {kept}, as fetched, and the "
                    f"catalog gives {item.want}: refused. If the file changed at its source, fix the model's "
                    "sha256, or remove the old copy (llmgw ctl model remove --purge) so it is fetched again",
                    source=source, got=kept, want=item.want,
                )
        return ready

    def _start(self, key: Path, source: str, fetcher: Fetcher, items: list[_File]) -> _Flight:
        broadcast = Broadcast(source, self.progress_interval)
        task = asyncio.get_running_loop().create_task(self._bring(source, fetcher, items, broadcast))
        flight = _Flight(task, broadcast)
        self._flights[key] = flight

        def done(t: asyncio.Task) -> None:
            if not t.cancelled():
                t.exception()  # every waiter has it; none left is no reason for a warning
            if self._flights.get(key) is flight:
                del self._flights[key]

        task.add_done_callback(done)
        return flight

    async def _wait(self, flight: _Flight, on_progress: ProgressCallback | None) -> None:
        if on_progress is not None:
            flight.broadcast.add(on_progress)
        flight.waiters += 1
        try:
            await asyncio.shield(flight.task)
        finally:
            flight.waiters -= 1
            if on_progress is not None:
                flight.broadcast.discard(on_progress)
            # The last shard waiting was stopped: nobody needs the bytes now.
            # The part stays, and a later start carries on from it.
            if flight.waiters == 0 and not flight.task.done():
                flight.task.cancel()

    async def _bring(self, source: str, fetcher: Fetcher, items: list[_File], progress: Broadcast) -> None:
        """Fetch what is missing of `items`, check what needs checking, and name each file only once it passed."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120),
            )
        headers = fetcher.headers()
        to_fetch: list[_File] = []
        to_check: list[_File] = []
        present = 0
        for item in items:
            if item.target.is_file():
                item.size = item.target.stat().st_size
                present += item.size
                if item.want and read_kept(item.target) != item.want:
                    to_check.append(item)
            else:
                to_fetch.append(item)
        whole = len(items) > 1
        total = present
        if whole and to_fetch:
            # The set's size, asked before its first byte: a set's progress
            # is the whole set's (the original showed "59% of 46.1 GB", one
            # part, for a 188 GB model).
            sizes = await asyncio.gather(*(self._size(source, fetcher, i, headers) for i in to_fetch))
            for item, size in zip(to_fetch, sizes, strict=True):
                item.size = max(size, 0)
            # -1: a server that did not say; a count that rises beats a made-up percentage.
            total = 0 if -1 in sizes else present + sum(sizes)
            if total:
                arrived = sum(size_of(part_path(i.target)) for i in to_fetch)
                check_room(self.cache_dir, total - present - arrived, source)
        done_before = present
        for item in to_fetch:
            def on_bytes(done: int, file_total: int, before: int = done_before) -> None:
                if whole:
                    progress.update(before + done, total)
                else:
                    progress.update(done, file_total)
            item.size = await self._download(source, fetcher, item, headers, on_bytes)
            done_before += item.size
            if item.want:
                to_check.append(item)
            else:
                await asyncio.to_thread(finish, item.target)
        progress.update(done_before, done_before, force=True)
        if to_check:
            await self._check(source, items, to_check, progress)

    async def _download(self, source: str, fetcher: Fetcher, item: _File, headers: dict[str, str],
                        on_bytes: Callable[[int, int], None]) -> int:
        """One file into its part, from the first of the model mirrors that serves it (a mirror that cannot be
        reached is passed over after a couple of tries), or from its one address."""
        assert self._session is not None
        urls = fetcher.urls(source, item.name) if isinstance(fetcher, MirroredHfFetcher | MirrorFetcher) \
            else [item.url]
        for i, url in enumerate(urls):
            last = i == len(urls) - 1
            try:
                return await download_part(
                    self._session, url, item.target, source=_shown(source, item), headers=headers,
                    advice=fetcher.advice, on_bytes=on_bytes, attempts=self.attempts if last else _NEXT_MIRROR,
                    ssl=fetcher.ssl)
            except FetchFailed as e:
                if last:
                    raise
                log.warning("%s; trying the next mirror, %s", e, redact(urls[i + 1]))
        raise AssertionError("a fetcher gives at least one address")

    async def _size(self, source: str, fetcher: Fetcher, item: _File, headers: dict[str, str]) -> int:
        """A set file's size, from a HEAD; -1 when the server does not say.

        A file the server lacks fails the set now, before a byte of the others is fetched.
        """
        assert self._session is not None
        try:
            # Not followed: Hugging Face sends LFS files to a CDN whose URLs
            # are signed for GET, and says the size on the redirect itself.
            async with self._session.head(item.url, headers=headers, allow_redirects=False,
                                          ssl=fetcher.ssl or True) as resp:
                if resp.status == 503 and resp.headers.get(MIRROR_PHASE):
                    return -1  # the mirror is still bringing it in; the download waits for it
                if resp.status >= 400:
                    raise FetchFailed(f"{_shown(source, item)} answered {resp.status} {resp.reason or ''}".rstrip()
                                      + f": {fetcher.advice(resp.status)}", status=resp.status)
                if 300 <= resp.status < 400:
                    linked = resp.headers.get("X-Linked-Size", "")
                    return int(linked) if linked.isdigit() else -1
                return -1 if resp.content_length is None else resp.content_length
        except (TimeoutError, aiohttp.ClientError):
            # Asked again by the download itself, which tries again and says so.
            return -1

    async def _check(self, source: str, items: list[_File], to_check: list[_File], progress: Broadcast) -> None:
        """The sha256 of each file that needs it, several at once, reported as the set's `checking` phase."""
        set_total = sum(i.size for i in items)
        counter = Counter(set_total - sum(i.size for i in to_check))
        paths = {(i.target if i.target.is_file() else part_path(i.target)): i for i in to_check}
        progress.update(counter.value, set_total, CHECKING, force=True)
        sums = await sha256_many(
            paths, counter, self.check_at_once,
            on_tick=lambda: progress.update(counter.value, set_total, CHECKING), interval=self.progress_interval,
        )
        wrong: list[tuple[_File, str]] = []
        for path, item in paths.items():
            got = sums[path]
            if got != item.want:
                path.unlink(missing_ok=True)
                kept_path(item.target).unlink(missing_ok=True)
                discard(item.target)
                wrong.append((item, got))
                log.warning("%s has sha256 %s, the catalog gives %s; deleted", _shown(source, item), got, item.want)
                continue
            if path != item.target:
                await asyncio.to_thread(finish, item.target)
            keep(item.target, got)
        progress.update(counter.value, set_total, CHECKING, force=True)
        if wrong:
            item, got = wrong[0]
            more = f" ({len(wrong) - 1} more of the set's files differ too)" if len(wrong) > 1 else ""
            raise ChecksumMismatch(
                f"{_shown(source, item)} arrived with sha256 {got}, and the catalog gives {item.want} for it: "
                f"the file was deleted{more}. If it changed at its source on purpose, give the model the new "
                "sha256; otherwise the next start fetches it again",
                source=source, got=got, want=item.want,
            )

    # --- a path on the node ---------------------------------------------------------------------

    async def _local(self, fetcher: PathFetcher, source: str, want: str, files: dict[str, str],
                     on_progress: ProgressCallback | None) -> str:
        """A local path, used where it is; checked when a sum is given, the result kept in the cache's .local/."""
        path = fetcher.path(source)
        for name in files:
            for part in name.split("/"):
                _check_component(part, what=f"the set at {path} names {name!r}, which")
        wanted = {path / n: w for n, w in files.items()} if files else {path: want}
        for file in wanted:
            if files and not file.is_file():
                raise WeightsError(f"{file} is not on this node, and the set at {path} names it")
        needed = {f: w for f, w in wanted.items() if w and self._local_kept(f) != w}
        if needed:
            progress = Broadcast(source, self.progress_interval)
            if on_progress is not None:
                progress.add(on_progress)
            total = sum(f.stat().st_size for f in needed)
            counter = Counter()
            progress.update(0, total, CHECKING, force=True)
            sums = await sha256_many(
                needed, counter, self.check_at_once,
                on_tick=lambda: progress.update(counter.value, total, CHECKING), interval=self.progress_interval)
            progress.update(counter.value, total, CHECKING, force=True)
            for file, w in needed.items():
                if sums[file] != w:
                    # Not the cache's to delete: the operator put it there.
                    raise ChecksumMismatch(
                        f"{file} has sha256 {sums[file]}, and the catalog gives {w} for it: refused and left "
                        "where it is. Put the right file there, or fix the model's sha256",
                        source=source, got=sums[file], want=w,
                    )
                self._keep_local(file, w)
        return str(path)

    def _local_record(self, file: Path) -> Path:
        name = hashlib.sha256(os.fsencode(os.path.realpath(file))).hexdigest()
        return self.cache_dir / ".local" / name

    def _local_kept(self, file: Path) -> str:
        try:
            digest, size, mtime = self._local_record(file).read_text().split()
            st = file.stat()
        except (OSError, ValueError):
            return ""
        return digest if (size, mtime) == (str(st.st_size), str(st.st_mtime_ns)) else ""

    def _keep_local(self, file: Path, digest: str) -> None:
        record = self._local_record(file)
        record.parent.mkdir(parents=True, exist_ok=True)
        st = file.stat()
        record.write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n")

    # --- deleting -------------------------------------------------------------------------------

    def _delete(self, target: Path) -> int | None:
        """Delete a cached file (with its part and kept sum) or a set's directory; the bytes freed, None if absent."""
        self._inside(target, str(target))
        freed = 0
        found = False
        if target.is_dir() and not target.is_symlink():
            found = True
            for dirpath, _, names in os.walk(target):
                freed += sum(_size(Path(dirpath) / n) for n in names)
            shutil.rmtree(target)
        extras = [part_path(target), meta_path(target), kept_path(target)]
        for path in ([target] if target.is_file() or target.is_symlink() else []) + extras:
            if path.exists() or path.is_symlink():
                found = True
                freed += _size(path)
                path.unlink()
        if not found:
            return None
        # Empty directories the source's path made, up to the cache itself.
        parent = target.parent
        root = self._root()
        while Path(os.path.realpath(parent)) != root and root in Path(os.path.realpath(parent)).parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
        return freed


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _check_component(part: str, what: str) -> None:
    if part in ("", ".", "..") or "/" in part or "\\" in part or "\0" in part:
        raise UnsafeName(f"{what} would lead out of the directory it belongs in; refused")
    if part.startswith(".") and part.endswith(_OWN_SUFFIXES):
        raise UnsafeName(f"{what} has the name of the cache's own bookkeeping files; refused")


def _sum(given: str, what: str) -> str:
    """A sha256 as the catalog gave it, lowercase; refused now if it is not one, not after a download."""
    digest = given.strip().lower().removeprefix("sha256:")
    if digest and not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise WeightsError(f"the sha256 given for {redact(what)} is {given!r}, which is not one (64 hex digits); "
                           "fix the model's sha256 in the catalog")
    return digest


def _shown(source: str, item: _File) -> str:
    return f"{redact(source)} {item.name}".rstrip() if item.name else redact(source)
