"""A PDF cut inside its last incremental update is refused, not ingested as the revision before it.

An incrementally updated PDF is its first revision (ending `%%EOF`) followed by each update (objects, an
xref, a trailer, `startxref`, its own `%%EOF`). Cut anywhere inside the last update, the bytes still hold
the older revision's `%%EOF` near the end, and MuPDF opens the older revision without a word (it reports
no repair; cut later, it repairs what it can). The documented choice: refuse the file, naming it and that its last revision is cut. A whole
incrementally updated PDF, and one padded after its `%%EOF` (blanks, line ends, NULs, beyond 2 KB), are
accepted. The PDFs are written by pymupdf here (`saveIncr()`, as an editor saving in place does)."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from contextual_assets.errors import DocumentError
from contextual_assets.parsing import parse_file
from tests import pdf_fixtures as fx

FIRST = "The boiler room door stays locked outside the inspection window."
SECOND = "Revision two: the boiler pressure limit was lowered to 6 bar after the audit."


def two_revisions(dest: Path) -> tuple[bytes, bytes]:
    """(the first revision's bytes, the whole file after an incremental update that adds a page)."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "revisions.pdf"
    doc = pymupdf.open()
    doc.new_page(width=fx.PAGE_WIDTH, height=fx.PAGE_HEIGHT).insert_text(
        (fx.MARGIN, fx.MARGIN), FIRST, fontname="helv", fontsize=fx.BODY_SIZE)
    doc.save(path, garbage=3, deflate=True, no_new_id=True)
    doc.close()
    first = path.read_bytes()
    doc = pymupdf.open(path)
    doc.new_page(width=fx.PAGE_WIDTH, height=fx.PAGE_HEIGHT).insert_text(
        (fx.MARGIN, fx.MARGIN), SECOND, fontname="helv", fontsize=fx.BODY_SIZE)
    doc.saveIncr()
    doc.close()
    whole = path.read_bytes()
    assert whole.startswith(first) and len(whole) > len(first), "saveIncr appends to the first revision"
    return first, whole


def cut_points(first: bytes, whole: bytes) -> dict[str, int]:
    """Places inside the update: after its first object opens, inside its xref table, inside its trailer,
    between `startxref` and `%%EOF`, and inside the final `%%EOF` itself."""
    update = len(first)

    def after(marker: bytes, extra: int) -> int:
        at = whole.index(marker, update)
        return at + len(marker) + extra

    return {"first object": after(b" obj", 5), "xref table": after(b"xref", 12), "trailer": after(b"trailer", 8),
            "startxref": after(b"startxref", 3), "end marker": len(whole.rstrip()) - 2}


def test_a_pdf_cut_inside_its_last_incremental_update_is_refused(tmp_path):
    first, whole = two_revisions(tmp_path / "make")
    for where, cut in cut_points(first, whole).items():
        path = tmp_path / f"cut-{where.replace(' ', '-')}.pdf"
        path.write_bytes(whole[:cut])
        if where in ("first object", "xref table", "trailer"):
            # What the check guards against: MuPDF reads the cut file as the older revision, silently.
            with pymupdf.open(path) as opened:
                assert opened.page_count == 1 and not opened.is_repaired, where
        with pytest.raises(DocumentError) as info:
            parse_file(path)
        message = str(info.value)
        assert message.startswith(f"{path}: PDF is truncated: its last revision"), (where, message)
        assert "cut off" in message and "\n" not in message, (where, message)


def test_whole_and_padded_incrementally_updated_pdfs_are_accepted(tmp_path):
    first, whole = two_revisions(tmp_path / "make")
    variants = {
        "whole.pdf": whole,
        "padded.pdf": whole + b"\r\n \t\n" + b"\x00" * 4096,  # padding longer than the old 2 KB window
        "first-padded.pdf": first + b"\n" * 3000,
    }
    for name, data in variants.items():
        path = tmp_path / name
        path.write_bytes(data)
        parsed, _ = parse_file(path)
        text = " ".join(" ".join(block.text.split()) for block in parsed.blocks)
        assert FIRST in text, name
        if name != "first-padded.pdf":
            assert parsed.pages == 2 and SECOND in text, name


def test_a_file_cut_before_any_end_marker_is_still_refused(tmp_path):
    path = fx.truncated_pdf(tmp_path)
    with pytest.raises(DocumentError, match="truncated"):
        parse_file(path)
