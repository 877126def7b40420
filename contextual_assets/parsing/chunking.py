"""Split parsed blocks into chunks that respect section boundaries and a token budget."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from contextual_assets.models import Chunk, content_hash
from contextual_assets.parsing.blocks import Block, ParsedSource
from contextual_assets.parsing.tokens import TokenCounter

CHUNKER_VERSION = "sections-v1"

_SENTENCE_END = re.compile(r"(?<=[.!?。؟])\s+")


def _split_units(block: Block) -> list[str]:
    """Smallest pieces a chunk may be cut between: lines for code, sentences for prose."""
    if block.is_code:
        return block.text.split("\n")
    return [s for s in _SENTENCE_END.split(block.text) if s.strip()]


# Above this many characters, an unspaced "word" is cut in bounded windows instead of being
# re-tokenized whole for every cut (which is quadratic: a multi-megabyte blob would take hours).
_LARGE_WORD_CHARS = 20_000


def _pack_words(words: list[str], budget: int, counter: TokenCounter) -> list[str]:
    """Greedy packing of words into pieces of at most `budget` tokens (a word that alone exceeds
    the budget becomes its own piece). The longest fitting prefix is found by galloping and
    bisection, so each piece costs O(log n) token counts rather than one count per word."""
    pieces: list[str] = []
    start, n = 0, len(words)
    while start < n:

        def fits(end: int) -> bool:
            return counter.count(" ".join(words[start:end])) <= budget

        good, step = start + 1, 1  # the first word is always taken
        bad = n + 1
        while good + step <= n:
            if fits(good + step):
                good += step
                step *= 2
            else:
                bad = good + step
                break
        while bad - good > 1 and good < n:
            mid = (good + bad) // 2
            if mid > n or not fits(mid):
                bad = mid
            else:
                good = mid
        pieces.append(" ".join(words[start:good]))
        start = good
    return pieces


def _fit_prefix(text: str, budget: int, counter: TokenCounter) -> int:
    """Length of the longest prefix of `text` (found by bisection) that holds at most `budget`
    tokens; at least one character."""
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _hard_split(text: str, budget: int, counter: TokenCounter) -> list[str]:
    """A single sentence or line longer than the budget: cut on whitespace."""
    pieces = _pack_words(text.split(" "), budget, counter)
    # A "word" that alone exceeds the budget (e.g. a base64 blob) is cut by characters. A huge one
    # is cut through a bounded window (re-tokenizing all of it per cut is quadratic); a proportional
    # cut that still holds too many tokens is shrunk until it fits.
    large = max(_LARGE_WORD_CHARS, budget * 8)
    result: list[str] = []
    for piece in pieces:
        while len(piece) > 1:
            window = piece[: budget * 8] if len(piece) > large else piece
            total = counter.count(window)
            if total <= budget and window is piece:
                break
            cut = max(1, len(window) * budget // max(1, total))
            if counter.count(window[:cut]) > budget:
                cut = _fit_prefix(window[:cut], budget, counter)
            result.append(piece[:cut])
            piece = piece[cut:]
        result.append(piece)
    return [p for p in result if p.strip()]


def chunk_blocks(doc_id: str, parsed: ParsedSource, counter: TokenCounter, budget: int) -> list[Chunk]:
    """Greedy packing of consecutive blocks of the same section into chunks of at most `budget` tokens."""
    packer = _ChunkPacker(doc_id, parsed, counter, budget)
    for block in parsed.blocks:
        packer.add_block(block)
    packer.flush()
    return packer.chunks


def _block_pages(block: Block) -> list[int]:
    return [block.page] if block.page else []


@dataclass
class _ChunkPacker:
    """One document's chunks so far, and the units of its current section waiting for the next chunk."""

    doc_id: str
    parsed: ParsedSource
    counter: TokenCounter
    budget: int
    chunks: list[Chunk] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    pending_tokens: int = 0
    pending_pages: list[int] = field(default_factory=list)
    pending_key: tuple | None = None  # (section path, source doc) of the pending units
    # The latest block of the pending section: its metadata labels the chunk the pending units become.
    pending_block: Block | None = None

    def add_block(self, block: Block) -> None:
        """Pack a block: a fixed chunk alone, else its units after the pending ones of its section."""
        if block.fixed_chunk:
            self.flush()
            self.emit(block.text, block, _block_pages(block))
            return
        key = (tuple(block.section_path), block.source_doc)
        if key != self.pending_key:
            self.flush()
            self.pending_key = key
        self.pending_block = block
        for unit in _split_units(block):
            self._add_unit(unit, block)

    def _add_unit(self, unit: str, block: Block) -> None:
        """Add one unit to the pending chunk, flushing first when it would overflow; a unit over the budget
        alone is hard-split into chunks of its own."""
        tokens = self.counter.count(unit)
        if tokens > self.budget:
            self.flush()
            for piece in _hard_split(unit, self.budget, self.counter):
                self.emit(piece, block, _block_pages(block))
            return
        if self.pending and self.pending_tokens + tokens + 1 > self.budget:
            self.flush()
        self.pending.append(unit)
        self.pending_tokens += tokens + 1
        if block.page:
            self.pending_pages.append(block.page)

    def flush(self) -> None:
        """Emit the pending units as one chunk (if any) and start an empty one."""
        if self.pending and self.pending_block is not None:
            joiner = "\n" if self.pending_block.is_code else " "
            self.emit(joiner.join(self.pending), self.pending_block, self.pending_pages)
        self.pending, self.pending_tokens, self.pending_pages = [], 0, []

    def emit(self, text: str, block: Block, pages: list[int]) -> None:
        """Append `text` as the next chunk, labelled from `block`; blank text is no chunk."""
        text = text.strip("\n")
        if not text.strip():
            return
        self.chunks.append(
            Chunk(
                doc_id=self.doc_id,
                source_doc=block.source_doc or self.doc_id,
                title=block.title or self.parsed.title,
                ordinal=len(self.chunks),
                section_path=block.section_path,
                page_start=min(pages) if pages else None,
                page_end=max(pages) if pages else None,
                text=text,
                token_count=self.counter.count(text),
                content_hash=content_hash(text),
                external_id=block.external_id,
            )
        )
