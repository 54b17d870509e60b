"""Paged KV blocks with prefix caching on full blocks, as vLLM V1's KVCacheManager counts them.

Blocks are counted, not addressed: a request holds references to cached full blocks (shared,
identified by a hash chain over token ids) and a number of private blocks (its partial last
block, and full blocks whose content another request had already cached). Unreferenced cached
blocks stay in an LRU list and count as free, exactly as `kv_cache_usage_perc` treats them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol


class KVHolder(Protocol):
    """What the cache needs from a request."""

    cached_refs: list[int]
    private_blocks: int
    block_hashes: list[int]
    committed_blocks: int

    def block_content(self, index: int, block_size: int) -> object: ...


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class KVCache:
    """Block accounting for one engine."""

    def __init__(self, num_blocks: int, block_size: int = 16, *, prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free_uncached = num_blocks
        self.refcount: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def free_blocks(self) -> int:
        return self.free_uncached + len(self.evictable)

    def usage(self) -> float:
        """Share of blocks pinned by live requests (vLLM: 1 - free/total)."""
        return 1.0 - self.free_blocks / self.num_blocks if self.num_blocks else 0.0

    def held_blocks(self, req: KVHolder) -> int:
        return len(req.cached_refs) + req.private_blocks

    def _hash_chain(self, req: KVHolder, upto_blocks: int) -> list[int]:
        """Extend the request's block hash chain to `upto_blocks` full blocks."""
        hashes = req.block_hashes
        bs = self.block_size
        while len(hashes) < upto_blocks:
            i = len(hashes)
            parent = hashes[-1] if hashes else 0
            hashes.append(hash((parent, req.block_content(i, bs))))
        return hashes

    def lookup(self, req: KVHolder, num_tokens: int) -> list[int]:
        """Cached full-block hashes at the start of the request (the last token is always computed)."""
        if not self.prefix_caching or num_tokens <= 1:
            return []
        max_blocks = (num_tokens - 1) // self.block_size
        hits: list[int] = []
        for h in self._hash_chain(req, max_blocks):
            if h not in self.refcount:
                break
            hits.append(h)
        return hits

    def can_admit(self, hits: Sequence[int], num_computed_after: int) -> bool:
        """Whether the hits plus new blocks up to `num_computed_after` tokens fit."""
        needed = _ceil_div(num_computed_after, self.block_size) - len(hits)
        evictable_hits = sum(1 for h in hits if h in self.evictable)
        return needed <= self.free_blocks - evictable_hits

    def admit(self, req: KVHolder, hits: Sequence[int]) -> None:
        """Take references on the prefix hits."""
        for h in hits:
            self.refcount[h] += 1
            self.evictable.pop(h, None)
            req.cached_refs.append(h)

    def allocate(self, req: KVHolder, num_tokens_after: int) -> bool:
        """Ensure blocks for `num_tokens_after` computed tokens; False when the pool is exhausted."""
        needed = _ceil_div(num_tokens_after, self.block_size) - self.held_blocks(req)
        if needed <= 0:
            return True
        if needed > self.free_blocks:
            return False
        from_free = min(needed, self.free_uncached)
        self.free_uncached -= from_free
        for _ in range(needed - from_free):
            h, _ = self.evictable.popitem(last=False)
            del self.refcount[h]
        req.private_blocks += needed
        return True

    def commit_full_blocks(self, req: KVHolder, num_computed: int) -> None:
        """Register blocks that became full as cached (prefix caching)."""
        if not self.prefix_caching:
            return
        full = num_computed // self.block_size
        start = max(req.committed_blocks, len(req.cached_refs))
        if full <= start:
            return
        hashes = self._hash_chain(req, full)
        for i in range(start, full):
            h = hashes[i]
            if h in self.refcount or req.private_blocks == 0:
                continue  # duplicate content: the block stays private
            req.private_blocks -= 1
            self.refcount[h] = 1
            req.cached_refs.append(h)
        req.committed_blocks = full

    def free(self, req: KVHolder) -> None:
        """Release everything the request holds; cached blocks become evictable (most recent last)."""
        for h in reversed(req.cached_refs):
            n = self.refcount[h] - 1
            self.refcount[h] = n
            if n == 0:
                self.evictable[h] = None
        req.cached_refs.clear()
        self.free_uncached += req.private_blocks
        req.private_blocks = 0
        req.committed_blocks = 0

    def reset_prefix_cache(self) -> bool:
        """Drop every unreferenced cached block (vLLM refuses while blocks are in use: False)."""
        if len(self.evictable) + self.free_uncached < self.num_blocks:
            return False
        for h in self.evictable:
            del self.refcount[h]
        self.free_uncached += len(self.evictable)
        self.evictable.clear()
        return True
