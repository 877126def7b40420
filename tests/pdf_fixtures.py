"""Builders for small edge-case PDFs used by the parsing tests.

Each builder writes one file into ``dest`` (created if missing) and returns its path. Content is
fixed, so tests can assert on the module-level constants below. Output is deterministic: no
random file identifier is written and the "random" bytes are seeded.

Fonts: headings use the base-14 ``hebo`` (Helvetica-Bold, span flag bit 16 set), body text uses
``helv`` (Helvetica) at 10 pt.
"""

from __future__ import annotations

import random
from pathlib import Path

import pymupdf

PAGE_WIDTH, PAGE_HEIGHT = pymupdf.paper_size("a4")
MARGIN = 72.0
HEADING_SIZES = {1: 16.0, 2: 13.0}
BODY_SIZE = 10.0

ENCRYPTED_USER_PASSWORD = "secret"
ENCRYPTED_OWNER_PASSWORD = "owner"
ENCRYPTED_TEXT = "Quarterly payroll figures are restricted to the finance team."

# Outline of `outlined_pdf`: [level, title, 1-based page].
OUTLINED_TOC: list[list] = [
    [1, "Introduction", 1],
    [2, "Background", 1],
    [1, "Method", 2],
    [2, "Data Collection", 2],
    [2, "Analysis", 3],
    [1, "Results", 3],
]
# Section title -> a sentence that appears only in that section's body (each on one line).
OUTLINED_SECTIONS: dict[str, str] = {
    "Introduction": "The lighthouse keeper logged 412 passing ships in March.",
    "Background": "Cobalt pigments were first traded through Antwerp in 1523.",
    "Method": "Each sample was weighed three times on a Sartorius balance.",
    "Data Collection": "Field notes were transcribed every evening at the Tromso station.",
    "Analysis": "A mixed-effects model absorbed the variation between observers.",
    "Results": "Median nesting success rose from 41 to 67 percent after the fence.",
}
_FILLER = (
    "This paragraph is ordinary filler text that repeats in several sections of the fixture.",
    "It exists so that every section has more than one line of body text to chunk.",
)

# Headings of `no_outline_pdf` as (level, text), in reading order; level 1 is bold 16 pt,
# level 2 bold 13 pt.
NO_OUTLINE_STRUCTURE: list[tuple[int, str]] = [
    (1, "Overview"),
    (1, "Installation"),
    (2, "Requirements"),
    (2, "Configuration"),
    (1, "Troubleshooting"),
]
NO_OUTLINE_HEADINGS: list[str] = [text for _, text in NO_OUTLINE_STRUCTURE]
# Heading -> a sentence that appears only in that section's body.
NO_OUTLINE_SECTIONS: dict[str, str] = {
    "Overview": "The relay unit forwards alarms from the pump house to the control room.",
    "Installation": "Mount the relay on a DIN rail inside the dry cabinet.",
    "Requirements": "A 24 volt supply rated for at least 2 amperes is required.",
    "Configuration": "Set the alarm delay to 45 seconds with the rotary switch.",
    "Troubleshooting": "A flashing orange light means the relay has lost its uplink.",
}
# `no_outline_pdf` starts a new page before these headings.
_NO_OUTLINE_PAGE_BREAKS = {"Configuration"}

GARBAGE_SEED = 20240301
GARBAGE_SIZE = 4096


def _save(doc: pymupdf.Document, path: Path, **kwargs) -> Path:
    doc.set_metadata(
        {"creationDate": "D:20240101000000+00'00'", "modDate": "D:20240101000000+00'00'"}
    )
    doc.save(path, garbage=3, deflate=True, no_new_id=True, **kwargs)
    doc.close()
    return path


class _Writer:
    """Writes lines top to bottom on the current page, failing loudly on overflow."""

    def __init__(self, doc: pymupdf.Document) -> None:
        self.doc = doc
        self.page = doc.new_page(width=PAGE_WIDTH, height=PAGE_HEIGHT)
        self.y = MARGIN

    def new_page(self) -> None:
        self.page = self.doc.new_page(width=PAGE_WIDTH, height=PAGE_HEIGHT)
        self.y = MARGIN

    def line(self, text: str, fontname: str = "helv", fontsize: float = BODY_SIZE) -> float:
        """Write one line; return the top y of its line box."""
        width = pymupdf.get_text_length(text, fontname=fontname, fontsize=fontsize)
        if width > PAGE_WIDTH - 2 * MARGIN:
            raise ValueError(f"fixture line too wide: {text!r}")
        if self.y + fontsize * 1.3 > PAGE_HEIGHT - MARGIN:
            raise ValueError(f"fixture page overflow at: {text!r}")
        top = self.y
        written = self.page.insert_text(
            (MARGIN, top + fontsize), text, fontname=fontname, fontsize=fontsize
        )
        assert written == 1
        self.y += fontsize * 1.3
        return top

    def heading(self, text: str, level: int) -> float:
        self.y += 8
        return self.line(text, fontname="hebo", fontsize=HEADING_SIZES[level])

    def gap(self, points: float = 6) -> None:
        self.y += points


def _outlined_document() -> pymupdf.Document:
    doc = pymupdf.open()
    writer = _Writer(doc)
    toc = []
    for level, title, page in OUTLINED_TOC:
        while writer.page.number + 1 < page:
            writer.new_page()
        top = writer.heading(title, level)
        writer.line(OUTLINED_SECTIONS[title])
        for filler in _FILLER:
            writer.line(filler)
        writer.gap()
        target = {"kind": pymupdf.LINK_GOTO, "page": page - 1, "to": pymupdf.Point(MARGIN, top)}
        toc.append([level, title, page, target])
    doc.set_toc(toc)
    return doc


def outlined_pdf(dest: Path, name: str = "outlined.pdf") -> Path:
    """Three pages with a two-level outline (`OUTLINED_TOC`) and bodies from `OUTLINED_SECTIONS`."""
    dest.mkdir(parents=True, exist_ok=True)
    return _save(_outlined_document(), dest / name)


def no_outline_pdf(dest: Path, name: str = "no_outline.pdf") -> Path:
    """Two pages, no outline; headings (`NO_OUTLINE_HEADINGS`) only differ by font size/weight."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    writer = _Writer(doc)
    for level, heading in NO_OUTLINE_STRUCTURE:
        if heading in _NO_OUTLINE_PAGE_BREAKS:
            writer.new_page()
        writer.heading(heading, level)
        writer.line(NO_OUTLINE_SECTIONS[heading])
        for filler in _FILLER:
            writer.line(filler)
        writer.gap()
    return _save(doc, dest / name)


def encrypted_pdf(dest: Path, name: str = "encrypted.pdf") -> Path:
    """One page, AES-256 encrypted; opening needs `ENCRYPTED_USER_PASSWORD` ("secret")."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    writer = _Writer(doc)
    writer.heading("Confidential", 1)
    writer.line(ENCRYPTED_TEXT)
    return _save(
        doc,
        dest / name,
        encryption=pymupdf.PDF_ENCRYPT_AES_256,
        user_pw=ENCRYPTED_USER_PASSWORD,
        owner_pw=ENCRYPTED_OWNER_PASSWORD,
    )


def image_only_pdf(dest: Path, name: str = "image_only.pdf") -> Path:
    """Two pages without any text: a raster image (like a scan) and vector drawings."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()

    pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 240, 160), False)
    pixmap.clear_with(235)
    pixmap.set_rect(pymupdf.IRect(20, 20, 220, 60), (40, 70, 160))
    pixmap.set_rect(pymupdf.IRect(20, 80, 150, 140), (200, 60, 50))
    scan = doc.new_page(width=PAGE_WIDTH, height=PAGE_HEIGHT)
    scan.insert_image(pymupdf.Rect(MARGIN, MARGIN, PAGE_WIDTH - MARGIN, 400), pixmap=pixmap)

    drawing = doc.new_page(width=PAGE_WIDTH, height=PAGE_HEIGHT)
    drawing.draw_rect(pymupdf.Rect(100, 100, 300, 220), color=(0, 0, 0), fill=(0.9, 0.8, 0.2))
    drawing.draw_circle(pymupdf.Point(400, 400), 60, color=(0, 0, 1), width=2)
    drawing.draw_line(pymupdf.Point(80, 600), pymupdf.Point(500, 700), color=(1, 0, 0), width=3)
    return _save(doc, dest / name)


def truncated_pdf(dest: Path, name: str = "truncated.pdf") -> Path:
    """The first half of the bytes of the outlined PDF (no xref table, no trailer)."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = _outlined_document()
    data = doc.tobytes(garbage=3, deflate=True, no_new_id=True)
    doc.close()
    path = dest / name
    path.write_bytes(data[: len(data) // 2])
    return path


def binary_garbage_pdf(dest: Path, name: str = "garbage.pdf") -> Path:
    """`GARBAGE_SIZE` seeded random bytes behind a ``.pdf`` name."""
    dest.mkdir(parents=True, exist_ok=True)
    data = random.Random(GARBAGE_SEED).randbytes(GARBAGE_SIZE)
    if data.startswith(b"%PDF"):  # cannot happen with this seed; keep the file unambiguous
        data = b"\x00" + data[1:]
    path = dest / name
    path.write_bytes(data)
    return path


def zero_byte_file(dest: Path, name: str = "empty.pdf") -> Path:
    """An empty file with a ``.pdf`` name."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / name
    path.write_bytes(b"")
    return path
