"""Plain text and Markdown."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import DocumentError
from .blocks import Block, ParsedSource

_ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def decode_text(path: Path, data: bytes) -> str:
    """UTF-8 (with or without BOM) or UTF-16 with a BOM; anything else is a clear error. NUL bytes
    mean a binary file (or UTF-16 without a byte-order mark), not text."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentError(
                str(path), f"not valid UTF-16 text despite its byte-order mark ({exc.reason} at offset {exc.start}); "
                "convert the file to UTF-8 and add it again",
            ) from None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DocumentError(
                str(path),
                f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                "convert the file to UTF-8 and add it again",
            ) from None
    if "\x00" in text:
        offset = text.index("\x00")
        raise DocumentError(
            str(path), f"binary content, not text (NUL character at offset {offset}); if it is UTF-16 text, save it "
            "as UTF-8 and add it again",
        )
    return text


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def parse_text(path: Path, data: bytes) -> ParsedSource:
    text = decode_text(path, data)
    blocks = [Block(text=p) for p in _paragraphs(text)]
    return ParsedSource(kind="text", title=path.stem, blocks=blocks)


def parse_markdown(path: Path, data: bytes) -> ParsedSource:
    text = decode_text(path, data)
    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    buffer: list[str] = []
    in_fence = False
    title: str | None = None

    def flush() -> None:
        body = "\n".join(buffer)
        for paragraph in _paragraphs(body):
            blocks.append(Block(text=paragraph, section_path=[t for _, t in stack]))
        buffer.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            buffer.append(line)
            continue
        match = None if in_fence else _ATX.match(line)
        if match is None:
            buffer.append(line)
            continue
        flush()
        level, heading = len(match.group(1)), match.group(2).strip()
        if title is None and level == 1:
            title = heading
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
    flush()
    return ParsedSource(kind="markdown", title=title or path.stem, blocks=_merge_fences(blocks))


def _merge_fences(blocks: list[Block]) -> list[Block]:
    """Blank lines inside a fenced code block split it into paragraphs; join them back."""
    merged: list[Block] = []
    open_fence = False
    for block in blocks:
        if open_fence and merged and merged[-1].section_path == block.section_path:
            merged[-1] = merged[-1].model_copy(update={"text": merged[-1].text + "\n\n" + block.text})
        else:
            merged.append(block)
        if block.text.count("```") % 2 == 1 or block.text.count("~~~") % 2 == 1:
            open_fence = not open_fence
    return merged
