"""Which prompt prefixes each replica has been sent: what cache-aware routing (`routing.py`) reads.

vLLM keeps the KV blocks of recent prompts and skips the prefill of a prefix it still holds
(automatic prefix caching; SGLang and TGI do the same). Header prompts share long prefixes: every
chunk of a section goes out with the same instructions, title and section text around it. Sent to
the replica that computed the section last, most of a request's prefill is a cache hit; spread by
load alone over n replicas, each of them computes the section again.

A client cannot see a server's cache, so the pool remembers what it sent where, as SGLang's router
does with its approximate radix tree: a prompt is cut into blocks of `BLOCK_CHARS` characters, each
block hashed together with everything before it (so a block matches only behind the same prefix),
and each replica keeps the hashes of its last `MEMORY_BLOCKS` blocks (about the prompt tokens one
GPU's KV cache holds: 2 M characters is ~0.5 M tokens). Characters, not tokens: the pool must not
tokenize, and a block of text is the same prefix for any tokenizer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

BLOCK_CHARS = 256
MEMORY_BLOCKS = 8192


def prefix_blocks(messages: Iterable[Mapping[str, str]]) -> tuple[int, ...]:
    """The chained hash of every full block of the prompt's text (roles included: a system message is
    not the same prefix as a user message with the same words)."""
    text = "".join(f"\x00{m.get('role', '')}\x00{m.get('content', '')}" for m in messages)
    hashes: list[int] = []
    h = 0
    for start in range(0, len(text) - BLOCK_CHARS + 1, BLOCK_CHARS):
        h = hash((h, text[start:start + BLOCK_CHARS]))
        hashes.append(h)
    return tuple(hashes)


class PrefixMemory:
    """The prompt blocks recently sent to one replica, least recently sent evicted first."""

    def __init__(self, capacity: int = MEMORY_BLOCKS):
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def matched(self, blocks: Sequence[int]) -> int:
        """How many of the prompt's leading blocks the replica was sent (a chained hash matches only
        behind its whole prefix, so the first miss ends the match)."""
        count = 0
        for h in blocks:
            if h not in self._blocks:
                break
            count += 1
        return count

    def remember(self, blocks: Sequence[int]) -> None:
        for h in blocks:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
