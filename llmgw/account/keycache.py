"""API keys as the hot path sees them: from memory, with one store read per miss.

A request's key is hashed and looked up here. A hit costs a dict lookup. A
miss reads the key and its chain's limits once, however many requests are
waiting on that same key at that moment (they all await one future), and
the answer — a key, or "no such key" — is kept for `auth.cache_ttl`. A
revocation made on this control plane drops the entry at once; one made on
another is seen when the entry's TTL runs out.

A key in use is read again in the background once its entry is in the last
fifth of its TTL, so a steady client never waits for the store: before, every
`auth.cache_ttl` one of its requests waited for six store reads in a row, a
millisecond or two in the tail at concurrency 1 (issue 9). An entry is never
served past its TTL, so a revocation made elsewhere is seen as soon as before.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from llmgw.account.keys import digest
from llmgw.account.limits import Effective, effective
from llmgw.store import ApiKey, KeysStore, ProjectPath, StoreError

REFRESH_AHEAD = 0.2  # the last fraction of an entry's TTL in which a use reads the key again in the background

# Unknown keys are remembered too, or a client retrying a wrong key would
# cost a store read per request; bounded so random keys cannot fill memory.
MAX_UNKNOWN = 10_000


@dataclass(frozen=True)
class Principal:
    key: ApiKey
    path: ProjectPath
    limits: Effective

    def refusal(self, now: float) -> str | None:
        """Why this key may not be used now, or None."""
        if self.key.revoked_at is not None:
            return "this API key was revoked"
        if self.key.expires_at is not None and self.key.expires_at <= now:
            return "this API key has expired"
        if self.key.owner_suspended:
            return "the person this API key belongs to is suspended; an administrator can lift it"
        if self.limits.expires_at is not None and self.limits.expires_at <= now:
            return "this API key's project has expired"
        return None


class KeyCache:
    def __init__(self, store: KeysStore, ttl: Callable[[], float]):
        self.store = store
        self._ttl = ttl
        self._known: dict[bytes, tuple[float, Principal]] = {}
        self._by_id: dict[str, bytes] = {}
        self._unknown: OrderedDict[bytes, float] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[Principal | None]] = {}
        self._refreshing: dict[bytes, asyncio.Task[None]] = {}
        self._generation = 0  # moved by invalidate() and clear(): a read begun before is not kept
        self.store_reads = 0

    def remembers(self, secret: str) -> bool:
        """True when a lookup of this key would be answered from memory, valid or not, without the store."""
        d = digest(secret)
        now = time.monotonic()
        hit = self._known.get(d)
        if hit is not None and hit[0] > now:
            return True
        until = self._unknown.get(d)
        return until is not None and until > now

    async def lookup(self, secret: str) -> Principal | None:
        """The key's principal, or None when no such key exists.

        Raises StoreError only when the key is not in memory and the store
        cannot be read; a key seen before is served from memory, stale if
        need be, while the store is away.
        """
        d = digest(secret)
        now = time.monotonic()
        hit = self._known.get(d)
        if hit is not None and hit[0] > now:
            if hit[0] - now < self._ttl() * REFRESH_AHEAD and d not in self._refreshing and d not in self._inflight:
                self._refreshing[d] = asyncio.get_running_loop().create_task(self._refresh(d))
            return hit[1]
        until = self._unknown.get(d)
        if until is not None and until > now:
            return None
        pending = self._inflight.get(d)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = asyncio.get_running_loop().create_future()
        self._inflight[d] = pending
        generation = self._generation
        try:
            result = await self._read(d)
        except StoreError as e:
            if hit is None:
                _fail(pending, e)
                raise
            result = hit[1]  # the store is away: the last known answer beats a refusal
        except BaseException:
            # Cancelled mid-read: the requests sharing this read must not wait forever.
            _fail(pending, StoreError("the key lookup was interrupted; try again"))
            raise
        else:
            if generation == self._generation:
                self._remember(d, result)
        finally:
            self._inflight.pop(d, None)
        pending.set_result(result)
        return result

    async def _refresh(self, d: bytes) -> None:
        generation = self._generation
        try:
            result = await self._read(d)
        except StoreError:
            return  # the entry runs out as it would have; the next use reads again, or serves it stale
        except asyncio.CancelledError:
            return
        finally:
            self._refreshing.pop(d, None)
        if generation == self._generation:
            if result is None:
                self._known.pop(d, None)
            self._remember(d, result)

    async def _read(self, d: bytes) -> Principal | None:
        self.store_reads += 1
        key = await self.store.key_by_digest(d)
        return None if key is None else await principal_of(self.store, key)

    def _remember(self, d: bytes, principal: Principal | None) -> None:
        until = time.monotonic() + self._ttl()
        if principal is None:
            self._unknown[d] = until
            self._unknown.move_to_end(d)
            while len(self._unknown) > MAX_UNKNOWN:
                self._unknown.popitem(last=False)
            return
        self._known[d] = (until, principal)
        self._by_id[principal.key.id] = d

    def invalidate(self, key_id: str) -> None:
        self._generation += 1
        d = self._by_id.pop(key_id, None)
        if d is not None:
            self._known.pop(d, None)

    def clear(self) -> None:
        """After a limits change: every cached chain may be out of date."""
        self._generation += 1
        self._known.clear()
        self._by_id.clear()
        self._unknown.clear()


def _fail(future: asyncio.Future[Principal | None], error: BaseException) -> None:
    future.set_exception(error)
    future.exception()  # marked retrieved: each waiter re-raises it itself


async def principal_of(store: KeysStore, key: ApiKey) -> Principal | None:
    """The key with its project's place in the tree and the limits of its chain, read from the store: what a
    request with this key is held to. None when its project is gone."""
    path = await store.project_path(key.project_id)
    if path is None:
        return None
    chain = [
        await store.get_limits("org", path.org.id),
        await store.get_limits("team", path.team.id),
        await store.get_limits("project", path.project.id),
        await store.get_limits("key", key.id),
    ]
    return Principal(key, path, effective(chain))
