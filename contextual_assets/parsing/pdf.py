"""PDF via pymupdf: the outline gives the section tree; without one, headings are detected from
font size and weight."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from functools import cache
from importlib import metadata
from pathlib import Path

from ..errors import DocumentError
from ..settings import PlatformSettings
from .blocks import Block, ParsedSource

_BOLD_FLAG = 16
# Refuse larger PDFs by default (CTX_MAX_PDF_PAGES): a page bomb costs minutes of parsing.
DEFAULT_MAX_PDF_PAGES = PlatformSettings.default("max_pdf_pages")


@cache
def parser_version() -> str:
    """The PDF parser's version, as the index version records it (`contextual_assets.index_version`)."""
    # The installed distribution's metadata, not `pymupdf.VersionBind`: importing pymupdf costs ~0.5 s, and
    # every `ctx` command names the index version. PyMuPDF's wheels bundle their MuPDF, so its version
    # names the text extraction too.
    return f"pymupdf-{metadata.version('pymupdf')}"


def _open(path: Path, data: bytes, max_pages: int):
    import pymupdf

    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises several types for broken files
        raise DocumentError(str(path), f"not a readable PDF (corrupt or truncated): {exc}") from None
    cut = _cut_off(data)
    if cut is not None:
        # MuPDF silently repairs a cut-off file and returns what it can: refuse instead of indexing half
        # (or, for a cut incremental update, the revision before it).
        doc.close()
        raise DocumentError(str(path), cut)
    if doc.needs_pass:
        raise DocumentError(str(path), "PDF is password-protected; remove the password and add it again")
    if doc.page_count == 0:
        raise DocumentError(str(path), "PDF has no pages (corrupt or truncated file)")
    if doc.page_count > max_pages:
        raise DocumentError(
            str(path), f"PDF has {doc.page_count} pages, over the limit of {max_pages} (CTX_MAX_PDF_PAGES)"
        )
    return doc


# What a writer may leave after the last end-of-file marker of a whole file: line ends, blanks, NUL padding.
_PADDING = b" \t\r\n\x0c\x00"
# The start of an incremental update (objects, a cross-reference table or stream, a trailer): bytes like
# these after the last %%EOF are a revision whose own %%EOF never got written.
_UPDATE_BODY = re.compile(rb"\d+\s+\d+\s+obj\b|\bendobj\b|\bxref\b|\btrailer\b|\bstartxref\b")
_STARTXREF = re.compile(rb"startxref\s+(\d+)\s*%%EOF")


def _cut_off(data: bytes) -> str | None:
    """Why a PDF's bytes end before the file does, or None. A PDF ends with `%%EOF`; an incremental update
    (a later revision) is appended after it and ends with its own. Refused: no marker near the end; bytes
    after the last marker that begin an update (objects, xref, trailer, startxref) with no marker of
    their own: the last revision is cut, and MuPDF would silently open the one before it; a last
    `startxref` pointing past the end of the file. Padding (blanks, line ends, NULs) after the marker
    is accepted."""
    body = data.rstrip(_PADDING)
    eof = body.rfind(b"%%EOF")
    if eof >= 0 and _UPDATE_BODY.search(body, eof + 5):
        return (f"PDF is truncated: its last revision (an incremental update after byte {eof + 5}) is cut off "
                "before its end-of-file marker; refused rather than ingesting the revision before it: save or "
                "copy the file again")
    if eof < 0 or len(body) - eof > 2048:
        return "PDF is truncated (no end-of-file marker); the file is incomplete or damaged"
    pointer = _STARTXREF.search(body, max(0, eof - 64), eof + 5)
    if pointer is not None and int(pointer.group(1)) >= len(body):
        return (f"PDF is truncated: its cross-reference table is at byte {int(pointer.group(1))}, past the end of "
                f"the file ({len(data)} bytes); the file is incomplete or damaged")
    return None


def _page_lines(page) -> list[dict]:
    """Text lines of a page in reading order with their top y, font size and boldness."""
    lines: list[dict] = []
    for block_index, block in enumerate(page.get_text("dict", sort=True)["blocks"]):
        if block.get("type") != 0:
            continue
        for line in block["lines"]:
            spans = [s for s in line["spans"] if s["text"].strip()]
            if not spans:
                continue
            text = "".join(s["text"] for s in line["spans"]).strip()
            size = max(s["size"] for s in spans)
            bold = all((s["flags"] & _BOLD_FLAG) or "bold" in s["font"].lower() for s in spans)
            lines.append({"text": text, "y": line["bbox"][1], "size": round(size, 1), "bold": bold,
                          "block": block_index})
    return lines


def _join_lines(lines: list[str]) -> str:
    """Join a paragraph's lines, healing words hyphenated across a line break."""
    text = ""
    for line in lines:
        if text.endswith("-") and line[:1].islower():
            text = text[:-1] + line
        else:
            text = f"{text} {line}" if text else line
    return text


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def parse_pdf(path: Path, data: bytes, max_pages: int = DEFAULT_MAX_PDF_PAGES) -> ParsedSource:
    doc = _open(path, data, max_pages)
    try:
        pages = [_page_lines(page) for page in doc]
        toc = doc.get_toc(simple=True)
        metadata_title = (doc.metadata or {}).get("title") or ""
        page_count = doc.page_count
    except Exception as exc:
        raise DocumentError(str(path), f"PDF could not be read past its header (corrupt): {exc}") from None
    finally:
        doc.close()
    if not any(pages):
        raise DocumentError(
            str(path),
            f"PDF has no extractable text on any of its {page_count} pages (scanned or image-only?); "
            "run OCR on it first",
        )
    warnings: list[str] = []
    if toc:
        blocks = _blocks_from_outline(pages, toc)
        strategy = "outline"
    else:
        blocks = _blocks_from_fonts(pages)
        strategy = "font-headings"
    empty_pages = sum(1 for p in pages if not p)
    if empty_pages:
        warnings.append(f"{empty_pages} of {page_count} pages hold no text")
    title = metadata_title.strip() or (toc[0][1].strip() if toc else "") or path.stem
    return ParsedSource(kind=f"pdf:{strategy}", title=title, blocks=blocks, pages=page_count, warnings=warnings)


class _SectionWriter:
    """Collects body lines into paragraph blocks under the current stack of headings."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.stack: list[tuple[int, str]] = []
        self.paragraph: list[str] = []
        self.page = 0
        self.current_block: int | None = None

    def new_page(self, page_index: int) -> None:
        self.flush()
        self.page = page_index
        self.current_block = None

    def flush(self) -> None:
        if self.paragraph:
            self.blocks.append(Block(text=_join_lines(self.paragraph), section_path=[t for _, t in self.stack],
                                     page=self.page + 1))
            self.paragraph = []

    def heading(self, level: int, title: str, block: int | None = None) -> None:
        self.flush()
        if block is not None and self.stack and self.stack[-1][0] == level and self.current_block == block:
            self.stack[-1] = (level, f"{self.stack[-1][1]} {title}")  # a heading wrapped over two lines
        else:
            while self.stack and self.stack[-1][0] >= level:
                self.stack.pop()
            self.stack.append((level, title))
        self.current_block = block

    def line(self, line: dict) -> None:
        if self.current_block is not None and line["block"] != self.current_block:
            self.flush()
        self.current_block = line["block"]
        self.paragraph.append(line["text"])


def _blocks_from_outline(pages: list[list[dict]], toc: list[list]) -> list[Block]:
    # Locate each outline entry at (page, y): the heading line on its target page when found.
    anchors: list[tuple[int, float, int, str]] = []
    for level, title, page_no, *_ in toc:
        page_index = max(0, min(len(pages) - 1, (page_no or 1) - 1))
        y = 0.0
        wanted = _norm(title)
        for line in pages[page_index]:
            if _norm(line["text"]) == wanted or (wanted and _norm(line["text"]).startswith(wanted)):
                y = line["y"]
                break
        anchors.append((page_index, y, level, title.strip()))
    anchors.sort(key=lambda a: (a[0], a[1]))
    heading_keys = {(a[0], _norm(a[3])) for a in anchors}

    writer = _SectionWriter()
    cursor = 0
    for page_index, lines in enumerate(pages):
        writer.new_page(page_index)
        for line in lines:
            while cursor < len(anchors) and (anchors[cursor][0], anchors[cursor][1]) <= (page_index, line["y"] + 0.5):
                _, _, level, title = anchors[cursor]
                writer.heading(level, title)
                cursor += 1
            if (page_index, _norm(line["text"])) in heading_keys:
                continue  # the heading itself lives in the section path
            writer.line(line)
    writer.flush()
    return writer.blocks


def _blocks_from_fonts(pages: list[list[dict]]) -> list[Block]:
    sizes: Counter = Counter()
    for lines in pages:
        for line in lines:
            sizes[line["size"]] += len(line["text"])
    body = sizes.most_common(1)[0][0]
    body_bold_share = statistics.mean(
        [1.0 if line["bold"] else 0.0 for lines in pages for line in lines if line["size"] == body] or [0.0]
    )

    def is_heading(line: dict) -> bool:
        short = len(line["text"]) <= 120 and not line["text"].endswith((".", ",", ";"))
        larger = line["size"] >= body * 1.12
        bold_body = line["bold"] and line["size"] >= body and body_bold_share < 0.5
        return short and (larger or bold_body)

    heading_sizes = sorted({line["size"] for lines in pages for line in lines if is_heading(line)}, reverse=True)
    level_of = {size: rank + 1 for rank, size in enumerate(heading_sizes)}

    writer = _SectionWriter()
    for page_index, lines in enumerate(pages):
        writer.new_page(page_index)
        for line in lines:
            if is_heading(line):
                writer.heading(level_of[line["size"]], line["text"], block=line["block"])
            else:
                writer.line(line)
    writer.flush()
    return writer.blocks
