"""The simulated engine's KV memory: prompt block hashes, the legacy prefix cache, and the paged block
pool with its prefix-cache hits (what `Engine` admits against)."""

from __future__ import annotations

import collections


def block_hashes(tokens: list[str], block_size: int) -> list[int]:
    """The hash of every full block of `tokens`; a block's hash covers every token up to its end."""
    out, h = [], 0
    for i in range(len(tokens) // block_size):
        h = hash((h, tuple(tokens[i * block_size:(i + 1) * block_size])))
        out.append(h)
    return out


class PrefixCache:
    """LRU of block hashes (the legacy engine's cache, and the model floor's ideal one)."""

    def __init__(self, block_size: int, capacity_blocks: int):
        self.block_size = block_size
        self.capacity = capacity_blocks
        self.blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    def admit(self, tokens: list[str]) -> tuple[int, int]:
        """(hit tokens, queried tokens) for this prompt; its full blocks are then cached."""
        bs = self.block_size
        hits = 0
        hitting = True
        hashes = block_hashes(tokens, bs)
        for h in hashes:
            if h in self.blocks:
                self.blocks.move_to_end(h)
                if hitting:
                    hits += bs
            else:
                hitting = False
                self.blocks[h] = None
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return hits, len(hashes) * bs

    def clear(self) -> None:
        self.blocks.clear()


class BlockPool:
    """vLLM v1's paged KV cache with prefix caching: `num_blocks` blocks; a block is referenced by the
    running sequences using it, and free otherwise. Free blocks wait in an LRU queue (freed blocks join
    its tail, the tail block of a sequence first evicted); a free block may still hold a cached prompt
    block (its hash in `cached`) until it is reused, which evicts it."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.free: collections.OrderedDict[int, None] = collections.OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}
        self.evictions = 0

    @property
    def used(self) -> int:
        """Blocks referenced by running sequences."""
        return self.num_blocks - len(self.free)

    def hits(self, hashes: list[int], max_blocks: int) -> list[int]:
        out = []
        for h in hashes[:max_blocks]:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def take(self, hit_blocks: list[int], n_new: int) -> list[int] | None:
        """Reference `hit_blocks` and allocate `n_new` fresh blocks (evicting LRU cached ones); None,
        changing nothing, when they do not fit."""
        reusable = sum(1 for b in hit_blocks if self.ref[b] == 0)
        if n_new > len(self.free) - reusable:
            return None
        for b in hit_blocks:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
        return hit_blocks + [self.allocate() for _ in range(n_new)]

    def allocate(self) -> int:
        b, _ = self.free.popitem(last=False)
        h = self.hash[b]
        if h is not None:
            self.hash[b] = None
            if self.cached.get(h) == b:
                del self.cached[h]
            self.evictions += 1
        self.ref[b] = 1
        return b

    def register(self, block: int, h: int) -> None:
        if h not in self.cached and self.hash[block] is None:
            self.hash[block] = h
            self.cached[h] = block

    def release(self, blocks: list[int]) -> None:
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None
