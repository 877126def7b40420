"""Bad input beyond the parsing spine's list (tests/test_parsing.py covers encrypted, truncated,
image-only, empty and random-bytes PDFs, unsupported types, non-UTF-8 text and the limits at the
parser): each case here goes through the real ingest (Dagster runs in a temporary instance, the
real store, the real embedder) or the real sensor, and checks that the failure names the file and
the reason, that other documents are unaffected and that nothing already committed is lost."""

from __future__ import annotations

import os
import random
from pathlib import Path

import dagster as dg
import pymupdf
import pytest

from contextual_assets.cli.ingest_runs import (
    collect_sources,
    ingest_partitions,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from contextual_assets.errors import DocumentError
from contextual_assets.ingest.inbox.tick_plan import LocalInbox
from contextual_assets.parsing import parse_file
from contextual_assets.parsing.chunking import chunk_blocks
from contextual_assets.parsing.tokens import token_counter
from tests import pdf_fixtures as fx
from tests.integration.test_sensor import Harness

BUDGET = 200


class Ingest:
    """`ctx ingest` in this process: collect, register, one Dagster run per range, outcomes by key."""

    def __init__(self, settings, dagster_home: Path):
        self.settings = settings
        self.defs = build_definitions(settings)
        self.store = build_resources(settings)["store"].open()
        dagster_home.mkdir(parents=True, exist_ok=True)
        self.instance = dg.DagsterInstance.local_temp(str(dagster_home))
        self.root = dagster_home.parent  # the test's folder: keys relative to it, e.g. docs/report.pdf

    def __call__(self, *paths: Path) -> tuple[dict, list[str]]:
        sources, refused = collect_sources(paths, inbox=Path(self.settings.inbox), source_root=self.root)
        register_sources(self.store, self.instance, sources)
        outcomes = ingest_partitions(self.defs, self.instance, sources, log_level="CRITICAL")
        return {o.key: o for o in outcomes}, refused


def committed_chunks(store, key: str) -> int:
    return store.corpus.count_chunks(doc_id=key)


def many_pages_pdf(dest: Path, pages: int, name: str = "many_pages.pdf") -> Path:
    """`pages` pages, one short numbered line each."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page(width=200, height=200)
        page.insert_text((20, 40), f"Page {number} of the ledger.", fontname="helv", fontsize=10)
    doc.save(dest / name, garbage=1, deflate=True, no_new_id=True)
    doc.close()
    return dest / name


def test_binary_files_named_as_documents_fail_alone_and_keep_the_committed_version(tmp_path, settings_factory):
    ingest = Ingest(settings_factory(), tmp_path / "dagster_home")
    docs = tmp_path / "docs"
    report = fx.no_outline_pdf(docs, "report.pdf")
    notes = docs / "notes.md"
    notes.write_text("# Notes\n\nThe harbour crane was serviced on Tuesday.\n")
    outcomes, refused = ingest(docs)
    assert not refused and all(o.success for o in outcomes.values()), outcomes
    before = committed_chunks(ingest.store, "docs/report.pdf")
    assert before > 0

    # Overwrite the committed PDF with binary data; add an executable-like file behind `.pdf` that
    # carries a PDF header and trailer, and binary (valid UTF-8, NUL-filled) data behind `.txt`.
    rng = random.Random(7)
    report.write_bytes(rng.randbytes(8192))
    (docs / "fake.pdf").write_bytes(b"%PDF-1.7\n" + b"\x7fELF" + rng.randbytes(4000) + b"\n%%EOF\n")
    (docs / "dump.txt").write_bytes(b"header\x00\x00\x00" + bytes(range(1, 9)) * 200)
    notes.write_text("# Notes\n\nThe harbour crane was serviced on Wednesday.\n")
    outcomes, _ = ingest(docs)

    assert outcomes["docs/notes.md"].success, "a good document in the same ingest is unaffected"
    for key, reason in [("docs/report.pdf", "not a readable PDF"), ("docs/fake.pdf", "PDF"),
                        ("docs/dump.txt", "binary content, not text (NUL character at offset 6)")]:
        outcome = outcomes[key]
        assert not outcome.success, key
        assert key.split("/")[-1] in outcome.error and reason in outcome.error, outcome.error
    # The version committed before the file was broken is still there, whole.
    assert committed_chunks(ingest.store, "docs/report.pdf") == before
    assert committed_chunks(ingest.store, "docs/fake.pdf") == 0 == committed_chunks(ingest.store, "docs/dump.txt")


def test_thousands_of_pages_are_refused_by_a_configurable_limit(tmp_path, settings_factory, monkeypatch):
    path = many_pages_pdf(tmp_path / "docs", 2100)
    with pytest.raises(DocumentError) as info:
        parse_file(path)  # the default limit
    assert str(info.value) == f"{path}: PDF has 2100 pages, over the limit of 2000 (CTX_MAX_PDF_PAGES)"

    # The limit comes from CTX_MAX_PDF_PAGES, through settings, into the ingest run.
    from contextual_assets.settings import PlatformSettings

    monkeypatch.setenv("CTX_MAX_PDF_PAGES", "1500")
    limit = PlatformSettings.from_env().max_pdf_pages
    assert limit == 1500
    ingest = Ingest(settings_factory(max_pdf_pages=limit), tmp_path / "dagster_home")
    outcomes, _ = ingest(path)
    outcome = outcomes["docs/many_pages.pdf"]
    assert not outcome.success
    assert "many_pages.pdf" in outcome.error and "2100 pages, over the limit of 1500 (CTX_MAX_PDF_PAGES)" in outcome.error

    # Raised above the document's size, the same file is ingested, every page kept.
    parsed, _ = parse_file(path, max_pdf_pages=2500)
    assert parsed.pages == 2100
    text = " ".join(b.text for b in parsed.blocks)
    assert "Page 1 of the ledger." in text and "Page 2100 of the ledger." in text


def _wall_of_text_pdf(dest: Path, megabytes: float) -> tuple[Path, list[str]]:
    """One page (the largest PDF allows) holding `megabytes` of prose in 2-pt type."""
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(3)
    vocabulary = ["tariff", "quay", "ledger", "vessel", "manifest", "berth", "cargo", "pilot", "tug", "draft"]
    lines, size, n = [], 0, 0
    while size < megabytes * 1_000_000:
        n += 1
        sentence = f"Entry {n} records " + " ".join(rng.choice(vocabulary) for _ in range(rng.randint(8, 20))) + "."
        lines.append(sentence)
        size += len(sentence) + 1
    doc = pymupdf.open()
    page = doc.new_page(width=14400, height=14400)
    per_line, y = 6, 4.0
    for start in range(0, len(lines), per_line):
        page.insert_text((4, y), " ".join(lines[start:start + per_line]), fontname="helv", fontsize=2)
        y += 2.4
        assert y < 14400, "fixture overflows the page"
    path = dest / "wall.pdf"
    doc.save(path, garbage=1, deflate=True, no_new_id=True)
    doc.close()
    return path, lines


def _squash(text: str) -> str:
    return "".join(text.split())


def test_single_pdf_page_with_megabytes_of_text(tmp_path):
    path, lines = _wall_of_text_pdf(tmp_path, 1.2)
    parsed, _ = parse_file(path)
    assert parsed.pages == 1
    chunks = chunk_blocks("wall.pdf", parsed, token_counter(), BUDGET)
    assert all(c.token_count <= BUDGET for c in chunks)
    # Every sentence of the page arrives, in order, nothing dropped or duplicated.
    assert _squash(" ".join(c.text for c in chunks)) == _squash(" ".join(lines))
    assert {c.page_start for c in chunks} == {1}


@pytest.mark.parametrize("shape", ["words-without-sentence-ends", "one-unspaced-blob"])
def test_megabytes_on_one_line_are_chunked_within_budget_and_completely(tmp_path, shape):
    rng = random.Random(11)
    if shape == "words-without-sentence-ends":
        text = " ".join("".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 10)))
                        for _ in range(160_000))
    else:  # a base64-like blob with no whitespace at all, 2 MB
        text = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                       for _ in range(2_000_000))
    path = tmp_path / "one_line.txt"
    path.write_text(text)
    assert path.stat().st_size > 1_000_000
    counter = token_counter()
    parsed, _ = parse_file(path)
    chunks = chunk_blocks("one_line.txt", parsed, counter, BUDGET)
    assert chunks and all(c.token_count <= BUDGET for c in chunks)
    assert all(c.token_count == counter.count(c.text) for c in chunks[:50])
    assert _squash("".join(c.text for c in chunks)) == _squash(text)


HOSTILE_NAMES = [
    "it's \"quoted\".md",
    "a;b; DROP TABLE ctx_chunks;--.md",
    "  spaced   out  name .md",
    "Отчёт о продажах.md",
    "報告書 第3四半期.md",
    "تقرير الربع.md",
    "$(touch pwned) `id` & | > <.md",
    "back\\slash %s {0} %(x)s.md",
]


def test_hostile_file_names_through_the_sensor_and_the_run(tmp_path, settings_factory):
    settings = settings_factory()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for index, name in enumerate(HOSTILE_NAMES):
        (inbox / name).write_text(f"# Memo {index}\n\nThe codeword for memo {index} is zebra{index}quartz.\n")
    harness = Harness(settings, tmp_path / "dagster_home")
    data = harness.tick()
    keys = harness.partitions()
    assert len(keys) == len(HOSTILE_NAMES), "one distinct partition per file"
    assert set(harness.requested(data)) == keys
    allowed = set("._-/~")
    for key in keys:
        assert all(ch.isalnum() or ch in allowed for ch in key), key
    assert any("Отчёт_о_продажах" in k for k in keys) and any("報告書" in k for k in keys)
    assert any("تقرير" in k for k in keys)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()

    store = harness.store_resource.open()
    by_name = {Path(store.corpus.get_source(k).path).name: k for k in keys}
    assert set(by_name) == set(HOSTILE_NAMES), "each registered path is the file's exact name"
    outcomes = {o.key: o for o in ingest_partitions(harness.defs, harness.instance, [
        (k, Path(store.corpus.get_source(k).path)) for k in sorted(keys)], log_level="CRITICAL")}
    assert all(o.success and o.chunks >= 1 for o in outcomes.values()), outcomes
    version = store.corpus.index_versions()[0]["index_version"]
    for index, name in enumerate(HOSTILE_NAMES):
        hits = store.search.lexical(f"zebra{index}quartz", version, 3)
        assert hits and hits[0].doc_id == by_name[name], name


def test_symlinks_cannot_lead_out_of_the_inbox(tmp_path, settings_factory):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("The vault code is 7712.\n")
    (outside / "nested").mkdir()
    (outside / "nested" / "deep.md").write_text("# Deep\n\noutside text\n")
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    (inbox / "ok.txt").write_text("inside\n")
    (inbox / "relative.txt").symlink_to(Path("..") / "outside" / "secret.txt")
    (inbox / "sub" / "chain.txt").symlink_to(inbox / "relative.txt")  # a link to a link that leaves
    (inbox / "linked_dir").symlink_to(outside / "nested", target_is_directory=True)
    (inbox / "inside_link.txt").symlink_to(inbox / "ok.txt")  # stays inside: allowed

    listing = LocalInbox(inbox).list()
    refused = [r.reason for r in listing.refused.values()]
    assert sorted(f.key for f in listing.files.values()) == ["inside_link.txt", "ok.txt"]
    assert len(refused) == 2
    for name in ("relative.txt", "chain.txt"):
        message = next(r for r in refused if name in r)
        assert "resolves outside" in message and "refused" in message

    # `ctx ingest <folder>` applies the same rule to the folder it is given.
    # Keys are those of the resolved files: the link inside is the same document as its target.
    sources, refused = collect_sources([inbox], inbox=inbox)
    assert sorted(k for k, _ in sources) == ["ok.txt"]
    assert sum("resolves outside" in r for r in refused) == 2

    # A file that the sensor registered, then swapped for a link out of the inbox before its run:
    # the run refuses it and reads nothing outside.
    settings = settings_factory()
    harness = Harness(settings, tmp_path / "dagster_home")
    harness.tick()
    victim = inbox / "ok.txt"
    victim.unlink()
    victim.symlink_to(outside / "secret.txt")
    store = harness.store_resource.open()
    outcomes = ingest_partitions(harness.defs, harness.instance, [("ok.txt", victim)], log_level="CRITICAL")
    assert not outcomes[0].success
    assert "ok.txt" in outcomes[0].error and "symbolic link" in outcomes[0].error
    assert store.corpus.count_chunks(doc_id="ok.txt") == 0
    version_rows = store.search.lexical("vault code 7712", store.corpus.index_versions()[0]["index_version"], 5) \
        if store.corpus.index_versions() else []
    assert not version_rows


def test_file_over_the_size_limit_is_refused_with_the_reason(tmp_path, settings_factory):
    docs = tmp_path / "docs"
    docs.mkdir()
    big = docs / "big.txt"
    big.write_text("The quarterly tariff schedule follows. " * 40_000)  # 1.56 MB
    (docs / "small.txt").write_text("The small note is fine.\n")
    ingest = Ingest(settings_factory(max_file_mb=1.0), tmp_path / "dagster_home")
    outcomes, _ = ingest(docs)
    assert outcomes["docs/small.txt"].success
    error = outcomes["docs/big.txt"].error
    assert not outcomes["docs/big.txt"].success
    assert str(big.resolve()) in error and "file is 1.6 MB, over the limit of 1.0 MB (CTX_MAX_FILE_MB)" in error
    assert committed_chunks(ingest.store, "docs/big.txt") == 0


def test_hidden_folders_are_skipped_by_ctx_ingest_as_by_the_sensor(tmp_path):
    docs = tmp_path / "repo"
    (docs / ".git" / "hooks").mkdir(parents=True)
    (docs / ".git" / "hooks" / "pre-commit.sh").write_text("#!/bin/sh\necho hook\n")
    (docs / ".git" / "notes.md").write_text("# hidden\n")
    (docs / "README.md").write_text("# Visible\n\ntext\n")
    sources, refused = collect_sources([docs], inbox=tmp_path / "inbox", source_root=tmp_path)
    assert [k for k, _ in sources] == ["repo/README.md"] and refused == []
    assert sorted(f.key for f in LocalInbox(docs).list().files.values()) == ["README.md"]


def test_two_names_for_one_key_are_refused_not_merged(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    composed, decomposed = "caf\u00e9.md", "cafe\u0301.md"  # NFC and NFD spellings: two files on Linux
    (inbox / composed).write_text("# A\n\nfirst\n")
    (inbox / decomposed).write_text("# B\n\nsecond\n")
    if len(os.listdir(inbox)) != 2:
        pytest.fail("this file system folds Unicode normalization; the test needs two distinct names")
    listing = LocalInbox(inbox).list()
    refused = [r.reason for r in listing.refused.values()]
    assert [f.key for f in listing.files.values()] == ["caf\u00e9.md"]
    assert len(refused) == 1 and "same document key 'caf\u00e9.md'" in refused[0]
