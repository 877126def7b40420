"""A small, deterministic PDF typesetter for the sample corpus.

The sample PDFs are generated rather than checked in so that their structure (outline, page
breaks, heading fonts) is fixed by code the parsers are tested against. Content comes from the
YAML specs in ``pdfs/``; this module only lays it out.

Layout: headings use the base-14 font ``hebo`` (Helvetica-Bold) at 16 pt for level 1 and 13 pt
for level 2, the document title ``hebo`` at 20 pt, body text ``helv`` (Helvetica) at 10 pt.
Text is wrapped and paginated here, line by line, and every line is checked to fit the page.
Output is deterministic: metadata dates are fixed and no random file identifier is written, so
repeated calls produce byte-identical files.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pymupdf

__all__ = ["SamplePdf", "Section", "write_pdf"]


@dataclass(frozen=True)
class Section:
    """A heading (level 1 or 2) and the body paragraphs that follow it."""

    level: int
    title: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class SamplePdf:
    """Content and metadata of one generated PDF."""

    filename: str
    title: str
    author: str
    subject: str
    sections: tuple[Section, ...]
    preamble: tuple[str, ...] = ()
    with_outline: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SamplePdf:
        """Build a spec from a parsed YAML document (see ``pdfs/*.yaml``)."""
        sections = tuple(
            Section(level=int(s["level"]), title=str(s["title"]), paragraphs=tuple(s["paragraphs"]))
            for s in data["sections"]
        )
        for section in sections:
            if section.level not in _HEADING_STYLES:
                raise ValueError(f"{data['filename']}: heading level {section.level} is not 1 or 2")
        return cls(
            filename=str(data["filename"]),
            title=str(data["title"]),
            author=str(data["author"]),
            subject=str(data["subject"]),
            sections=sections,
            preamble=tuple(data.get("preamble") or ()),
            with_outline=bool(data.get("with_outline", True)),
        )


_PAGE_WIDTH, _PAGE_HEIGHT = pymupdf.paper_size("a4")
_MARGIN_X = 72.0
_MARGIN_TOP = 72.0
_MARGIN_BOTTOM = 72.0
_TEXT_WIDTH = _PAGE_WIDTH - 2 * _MARGIN_X
_LINE_SPACING = 1.3
# Fixed so that repeated runs produce identical files (PDF date format, UTC).
_PDF_DATE = "D:20240301090000+00'00'"
# Written into every PDF's metadata; kept from when the corpus lived in one module.
_CREATOR = "contextual_assets.samples"


@dataclass(frozen=True)
class _Style:
    fontname: str
    fontsize: float
    space_before: float
    space_after: float

    @property
    def leading(self) -> float:
        return self.fontsize * _LINE_SPACING


_TITLE_STYLE = _Style("hebo", 20, 0, 14)
_HEADING_STYLES = {1: _Style("hebo", 16, 16, 6), 2: _Style("hebo", 13, 10, 4)}
_BODY_STYLE = _Style("helv", 10, 0, 6)
# A heading is moved to the next page unless this many body lines fit below it.
_KEEP_WITH_NEXT_LINES = 2


def _text_width(text: str, style: _Style) -> float:
    return pymupdf.get_text_length(text, fontname=style.fontname, fontsize=style.fontsize)


def _wrap(text: str, style: _Style, width: float = _TEXT_WIDTH) -> list[str]:
    """Greedy word wrap using the font's real glyph widths."""
    if not text.isascii():
        # Base-14 fonts only cover a single-byte encoding; keep the sample text plain ASCII.
        raise ValueError(f"sample PDF text must be ASCII: {text[:40]!r}")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if _text_width(word, style) > width:
            raise ValueError(f"word too wide for the text column: {word!r}")
        candidate = f"{current} {word}" if current else word
        if _text_width(candidate, style) <= width:
            current = candidate
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


class _PdfLayout:
    """Flows styled blocks of text down A4 pages, starting a new page when one is full."""

    def __init__(self, doc: pymupdf.Document) -> None:
        self.doc = doc
        self.page: pymupdf.Page | None = None
        self.y = 0.0  # top of the next line box on the current page

    @property
    def page_number(self) -> int:
        """1-based number of the current page."""
        return self.page.number + 1 if self.page is not None else 0

    def _new_page(self) -> None:
        self.page = self.doc.new_page(width=_PAGE_WIDTH, height=_PAGE_HEIGHT)
        self.y = _MARGIN_TOP

    def _room(self) -> float:
        return _PAGE_HEIGHT - _MARGIN_BOTTOM - self.y

    def _draw_line(self, line: str, style: _Style) -> None:
        assert self.page is not None
        if self.y + style.leading > _PAGE_HEIGHT - _MARGIN_BOTTOM + 1e-6:
            raise RuntimeError(f"line would overflow the page: {line[:40]!r}")
        baseline = pymupdf.Point(_MARGIN_X, self.y + style.fontsize)
        written = self.page.insert_text(
            baseline, line, fontname=style.fontname, fontsize=style.fontsize
        )
        if written != 1:
            raise RuntimeError(f"insert_text wrote {written} lines for {line[:40]!r}")
        self.y += style.leading

    def heading(self, text: str, style: _Style) -> tuple[int, float]:
        """Draw a heading kept on one page with the first body lines; return (page, top y)."""
        lines = _wrap(text, style)
        needed = style.space_before + len(lines) * style.leading
        needed += style.space_after + _KEEP_WITH_NEXT_LINES * _BODY_STYLE.leading
        if self.page is None or needed > self._room():
            self._new_page()
        elif self.y > _MARGIN_TOP:
            self.y += style.space_before
        top = self.y
        for line in lines:
            self._draw_line(line, style)
        self.y += style.space_after
        return self.page_number, top

    def paragraph(self, text: str, style: _Style = _BODY_STYLE) -> None:
        """Draw a paragraph, breaking across pages line by line."""
        if self.page is None:
            self._new_page()
        for line in _wrap(text, style):
            if style.leading > self._room():
                self._new_page()
            self._draw_line(line, style)
        self.y += style.space_after


def write_pdf(spec: SamplePdf, path: pathlib.Path) -> None:
    """Typeset ``spec`` into ``path``: title, preamble, then each section, plus outline and metadata."""
    doc = pymupdf.open()
    try:
        layout = _PdfLayout(doc)
        layout.heading(spec.title, _TITLE_STYLE)
        for text in spec.preamble:
            layout.paragraph(text)
        toc: list[list] = []
        for section in spec.sections:
            page, top = layout.heading(section.title, _HEADING_STYLES[section.level])
            # The destination points at the heading, so a section can be located within its page.
            target = {"kind": pymupdf.LINK_GOTO, "page": page - 1}
            target["to"] = pymupdf.Point(_MARGIN_X, top)
            toc.append([section.level, section.title, page, target])
            for text in section.paragraphs:
                layout.paragraph(text)
        if spec.with_outline:
            doc.set_toc(toc, collapse=False)
        doc.set_metadata(
            {
                "title": spec.title,
                "author": spec.author,
                "subject": spec.subject,
                "keywords": "",
                "creator": _CREATOR,
                "producer": "PyMuPDF",
                "creationDate": _PDF_DATE,
                "modDate": _PDF_DATE,
                "trapped": "",
            }
        )
        # no_new_id: MuPDF would otherwise write a fresh random /ID into the trailer.
        doc.save(path, garbage=3, deflate=True, no_new_id=True)
    finally:
        doc.close()
