"""Which replica holds which blocks of a prompt in its prefix cache, from the engines' own KV events.

An engine caches a prompt in blocks of `block_size` tokens, each block known by the chain of blocks before it: a
block is reused only when every block before it is too. The agents follow each engine's events and send the
leader the blocks each replica gained and lost, named by llmgw's chain hash over their token ids
(llmgw/engines/kvevents.py, CachedBlocks); the router hashes a request's prompt the same way (`prompt_blocks`),
so a request's cached prefix on each replica is a walk down its chain.

One index per router, over every model's replicas (a block's hash starts from the model's own tokens, and the
scorer looks only at the model's candidates).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmgw.engines import chain


class PrefixIndex:
    """Block hash -> the replicas (shard ids) holding it."""

    def __init__(self) -> None:
        self._holders: dict[int, set[str]] = {}
        self._held: dict[str, set[int]] = {}
        self._block_size: dict[str, int] = {}

    def apply(self, shard: str, block_size: int, added: Iterable[int], removed: Iterable[int],
              cleared: bool = False) -> None:
        """One CachedBlocks: `cleared` first, then what was removed, then what was added."""
        if cleared:
            self.forget(shard)
        if shard not in self._held and not added:
            return  # nothing held, nothing to hold: a stopped replica's last word leaves no entry behind
        held = self._held.setdefault(shard, set())
        if block_size:
            self._block_size[shard] = block_size
        for h in removed:
            if h in held:
                held.discard(h)
                holders = self._holders.get(h)
                if holders is not None:
                    holders.discard(shard)
                    if not holders:
                        del self._holders[h]
        for h in added:
            if h not in held:
                held.add(h)
                self._holders.setdefault(h, set()).add(shard)

    def forget(self, shard: str) -> None:
        """Everything of one replica: stopped, lost, or its events broke off."""
        for h in self._held.pop(shard, ()):
            holders = self._holders.get(h)
            if holders is not None:
                holders.discard(shard)
                if not holders:
                    del self._holders[h]
        self._block_size.pop(shard, None)

    def shards(self) -> list[str]:
        return list(self._held)

    def blocks_of(self, shard: str) -> int:
        return len(self._held.get(shard, ()))

    def block_size(self, shards: Iterable[str]) -> int:
        """The block size these replicas' engines cut by (the first that said), 0 when none has yet."""
        return next((self._block_size[s] for s in shards if s in self._block_size), 0)

    def matched(self, blocks: Sequence[int]) -> dict[str, int]:
        """For each replica holding a prompt's first block: how many of its blocks it holds from the start."""
        found: dict[str, int] = {}
        alive: set[str] | None = None
        for depth, h in enumerate(blocks):
            holders = self._holders.get(h)
            alive = set(holders or ()) if alive is None else alive & (holders or set())
            if not alive:
                break
            for shard in alive:
                found[shard] = depth + 1
        return found


def prompt_blocks(tokens: Sequence[int], block_size: int) -> list[int]:
    """A prompt's full blocks as the index names them."""
    return chain(tokens, block_size) if block_size > 0 else []
