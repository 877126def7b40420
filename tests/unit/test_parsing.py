"""Parsing and chunking on generated fixtures (pymupdf writes the PDFs) and on the shared samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextual_assets.errors import DocumentError
from contextual_assets.parsing import parse_file
from contextual_assets.parsing.chunking import chunk_blocks
from contextual_assets.parsing.tokens import token_counter
from tests import pdf_fixtures as fx
from tests.support import shared_dataset

BUDGET = 200


@pytest.fixture(scope="module")
def counter():
    return token_counter()


def chunks_of(path: Path, counter, budget: int = BUDGET):
    parsed, _ = parse_file(path)
    return parsed, chunk_blocks("doc", parsed, counter, budget)


def test_outline_gives_section_paths(tmp_path, counter):
    parsed, chunks = chunks_of(fx.outlined_pdf(tmp_path), counter)
    assert parsed.kind == "pdf:outline"
    parents = {1: None}
    expected_paths = {}
    for level, title, _ in fx.OUTLINED_TOC:
        parents[level] = title
        expected_paths[title] = [parents[l] for l in range(1, level + 1)]
    for title, sentence in fx.OUTLINED_SECTIONS.items():
        holders = [c for c in chunks if sentence in c.text]
        assert len(holders) == 1, f"{sentence!r} should be in exactly one chunk"
        assert holders[0].section_path == expected_paths[title]
        assert holders[0].page_start is not None
    # Chunks never cross a section boundary and never repeat the heading as text.
    for chunk in chunks:
        owners = [t for t, s in fx.OUTLINED_SECTIONS.items() if s in chunk.text]
        assert len(owners) <= 1
        assert chunk.text.strip() not in {t for _, t, _ in fx.OUTLINED_TOC}


def test_headings_detected_from_font_without_outline(tmp_path, counter):
    parsed, chunks = chunks_of(fx.no_outline_pdf(tmp_path), counter)
    assert parsed.kind == "pdf:font-headings"
    seen = []
    for chunk in chunks:
        for heading in chunk.section_path:
            if heading not in seen:
                seen.append(heading)
    assert [h for h in seen if h in fx.NO_OUTLINE_HEADINGS] == fx.NO_OUTLINE_HEADINGS
    levels = dict((t, l) for l, t in fx.NO_OUTLINE_STRUCTURE)
    for heading, sentence in fx.NO_OUTLINE_SECTIONS.items():
        holder = next(c for c in chunks if sentence in c.text)
        assert holder.section_path[-1] == heading
        if levels[heading] == 2:
            assert len(holder.section_path) >= 2, "a level-2 heading nests under its level-1 parent"


def test_chunks_respect_token_budget_and_carry_identity(samples_dir, counter):
    for path in sorted(samples_dir.iterdir()):
        parsed, chunks = chunks_of(path, counter, budget=120)
        assert chunks, path
        assert [c.ordinal for c in chunks] == list(range(len(chunks)))
        for chunk in chunks:
            assert chunk.token_count <= 120, (path.name, chunk.token_count)
            assert chunk.token_count == counter.count(chunk.text)
            assert len(chunk.content_hash) == 32
        # Deterministic: the same file gives the same chunk identities.
        _, again = chunks_of(path, counter, budget=120)
        assert [c.content_hash for c in again] == [c.content_hash for c in chunks]


def test_sample_pdfs_have_outline_and_pages(samples_dir, counter):
    parsed, chunks = chunks_of(samples_dir / "supply_agreement.pdf", counter)
    assert parsed.kind == "pdf:outline" and parsed.pages and parsed.pages >= 3
    penalties = [c for c in chunks if "EUR 234,000" in c.text]
    assert penalties and any("Penalties" in p for p in penalties[0].section_path)
    assert all(c.page_start and c.page_end and c.page_start <= c.page_end for c in chunks)


def test_markdown_headings_ignore_fenced_code(samples_dir, counter):
    parsed, chunks = chunks_of(samples_dir / "architecture_notes.md", counter)
    assert parsed.kind == "markdown"
    all_headings = {h for c in chunks for h in c.section_path}
    fenced = [line.strip() for c in chunks for line in c.text.splitlines() if line.strip().startswith("# ")]
    assert fenced, "the fenced comment line stays in the chunk text"
    assert not any(f.lstrip("# ").strip() in all_headings for f in fenced)
    assert any(len(c.section_path) >= 2 for c in chunks)


def test_source_code_blocks_by_top_level_definition(samples_dir, counter):
    parsed, chunks = chunks_of(samples_dir / "rate_limiter.py", counter)
    assert parsed.kind == "code:python"
    sections = [c.section_path[0] for c in chunks]
    assert "TokenBucket" in sections and "SlidingWindowCounter" in sections
    bucket = [c for c in chunks if c.section_path == ["TokenBucket"]]
    assert bucket[0].text.lstrip().startswith(("class TokenBucket", "@"))


def test_rust_definitions(tmp_path, counter):
    source = tmp_path / "lib.rs"
    source.write_text("use std::fmt;\n\n/// A point.\npub struct Point { x: i32 }\n\nimpl Point {\n    fn norm(&self) -> i32 { self.x }\n}\n\npub fn origin() -> Point { Point { x: 0 } }\n")
    _, chunks = chunks_of(source, counter)
    # The struct and its impl share a section and fit the budget together.
    assert [c.section_path[0] for c in chunks] == ["(module)", "Point", "origin"]
    assert chunks[1].text.startswith("/// A point.") and "impl Point" in chunks[1].text


def test_plain_text_paragraphs(samples_dir, counter):
    parsed, chunks = chunks_of(samples_dir / "release_notes.txt", counter)
    assert parsed.kind == "text" and chunks


def test_prechunked_import_keeps_given_chunks(counter):
    path = shared_dataset("anthropic-codebase", "codebase_chunks.json")
    parsed, chunks = chunks_of(path, counter)
    assert parsed.kind == "prechunked-json"
    assert len(chunks) == 737
    assert len({c.source_doc for c in chunks}) == 90
    assert chunks[0].external_id.endswith(":0")


@pytest.mark.parametrize(
    ("builder", "reason"),
    [
        (fx.encrypted_pdf, "password-protected"),
        (fx.truncated_pdf, "truncated"),
        (fx.binary_garbage_pdf, "not a readable PDF"),
        (fx.zero_byte_file, "empty file"),
        (fx.image_only_pdf, "no extractable text"),
    ],
)
def test_bad_pdfs_fail_with_reason(tmp_path, builder, reason):
    path = builder(tmp_path)
    with pytest.raises(DocumentError) as info:
        parse_file(path)
    assert reason in str(info.value)
    assert str(path) in str(info.value)


def test_shared_password_protected_pdf():
    path = shared_dataset("pdf-samples", "libreoffice-writer-password.pdf")
    with pytest.raises(DocumentError, match="password-protected"):
        parse_file(path)


def test_unsupported_extension_and_non_utf8(tmp_path):
    odd = tmp_path / "table.xlsx"
    odd.write_bytes(b"PK\x03\x04")
    with pytest.raises(DocumentError, match="unsupported file type '.xlsx'"):
        parse_file(odd)
    latin = tmp_path / "notes.txt"
    latin.write_bytes("Caf\u00e9 cr\u00e8me".encode("latin-1"))
    with pytest.raises(DocumentError, match="not UTF-8"):
        parse_file(latin)


def test_file_size_and_page_limits(tmp_path, samples_dir):
    big = tmp_path / "big.txt"
    big.write_text("word " * 300_000)
    with pytest.raises(DocumentError, match="over the limit"):
        parse_file(big, max_bytes=1_000_000)
    with pytest.raises(DocumentError, match="pages, over the limit"):
        parse_file(samples_dir / "supply_agreement.pdf", max_pdf_pages=2)


def test_every_shared_sample_pdf_parses_or_fails_clearly(counter):
    for path in sorted(shared_dataset("pdf-samples").glob("*.pdf")):
        try:
            _, chunks = chunks_of(path, counter)
        except DocumentError as exc:
            assert path.name == "libreoffice-writer-password.pdf", exc
            continue
        assert chunks and all(c.token_count <= BUDGET for c in chunks)
    _, arabic = chunks_of(shared_dataset("pdf-samples", "habibi.pdf"), counter)
    assert any("\u062d" in c.text for c in arabic)
