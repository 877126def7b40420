"""Split parsed blocks into chunks that respect section boundaries and a token budget."""

from __future__ import annotations

import hashlib
import re

from .models import Chunk, content_hash
from .parsing.blocks import Block, ParsedSource
from .tokens import TokenCounter

CHUNKER_VERSION = "sections-v1"

_SENTENCE_END = re.compile(r"(?<=[.!?。؟])\s+")


def _split_units(block: Block) -> list[str]:
    """Smallest pieces a chunk may be cut between: lines for code, sentences for prose."""
    if block.is_code:
        return block.text.split("\n")
    return [s for s in _SENTENCE_END.split(block.text) if s.strip()]


def _hard_split(text: str, budget: int, counter: TokenCounter) -> list[str]:
    """A single sentence or line longer than the budget: cut on whitespace."""
    words = text.split(" ")
    pieces: list[str] = []
    current: list[str] = []
    for word in words:
        candidate = " ".join(current + [word])
        if current and counter.count(candidate) > budget:
            pieces.append(" ".join(current))
            current = [word]
        else:
            current.append(word)
    if current:
        pieces.append(" ".join(current))
    # A "word" that alone exceeds the budget (e.g. a base64 blob) is cut by characters.
    result: list[str] = []
    for piece in pieces:
        while counter.count(piece) > budget and len(piece) > 1:
            cut = max(1, len(piece) * budget // max(1, counter.count(piece)))
            result.append(piece[:cut])
            piece = piece[cut:]
        result.append(piece)
    return [p for p in result if p.strip()]


def chunk_blocks(doc_id: str, parsed: ParsedSource, counter: TokenCounter, budget: int) -> list[Chunk]:
    """Greedy packing of consecutive blocks of the same section into chunks of at most `budget` tokens."""
    chunks: list[Chunk] = []
    pending: list[str] = []
    pending_tokens = 0
    pending_pages: list[int] = []
    pending_key: tuple | None = None
    pending_block: Block | None = None

    def emit(text: str, block: Block, pages: list[int], token_count: int | None = None) -> None:
        text = text.strip("\n")
        if not text.strip():
            return
        chunks.append(
            Chunk(
                doc_id=doc_id,
                source_doc=block.source_doc or doc_id,
                title=block.title or parsed.title,
                ordinal=len(chunks),
                section_path=block.section_path,
                page_start=min(pages) if pages else None,
                page_end=max(pages) if pages else None,
                text=text,
                token_count=token_count if token_count is not None else counter.count(text),
                content_hash=content_hash(text),
                external_id=block.external_id,
            )
        )

    def flush() -> None:
        nonlocal pending, pending_tokens, pending_pages
        if pending and pending_block is not None:
            joiner = "\n" if pending_block.is_code else " "
            emit(joiner.join(pending), pending_block, pending_pages)
        pending, pending_tokens, pending_pages = [], 0, []

    for block in parsed.blocks:
        if block.fixed_chunk:
            flush()
            emit(block.text, block, [block.page] if block.page else [])
            continue
        key = (tuple(block.section_path), block.source_doc)
        if key != pending_key:
            flush()
            pending_key = key
        pending_block = block
        units = _split_units(block)
        for index, unit in enumerate(units):
            tokens = counter.count(unit)
            if tokens > budget:
                flush()
                for piece in _hard_split(unit, budget, counter):
                    emit(piece, block, [block.page] if block.page else [])
                continue
            if pending and pending_tokens + tokens + 1 > budget:
                flush()
            pending.append(unit)
            pending_tokens += tokens + 1
            if block.page:
                pending_pages.append(block.page)
    flush()
    return chunks


def document_fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
