"""The ingest assets through real Dagster runs, on DuckDB and on Postgres (pgserver)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from contextual_assets.cli.ingest_runs import (
    collect_sources,
    ingest_partitions,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from tests import pdf_fixtures as fx
from tests.support import copy_into, shared_dataset


def ingest(settings, paths):
    # Keyed relative to the test's folder (settings_factory's home is <tmp_path>/.ctx): corpus/<name>.
    sources, refused = collect_sources(paths, inbox=Path(settings.inbox), source_root=Path(settings.home).parent)
    assert not refused
    defs = build_definitions(settings)
    store = build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    register_sources(store, instance, sources)
    outcomes = ingest_partitions(defs, instance, sources, log_level="ERROR")
    return {o.key: o for o in outcomes}, store, instance


@pytest.fixture
def corpus(tmp_path, samples_dir):
    folder = tmp_path / "corpus"
    copy_into(sorted(samples_dir.iterdir()), folder)
    copy_into([shared_dataset("pdf-samples", "libreoffice-writer-password.pdf"),
               shared_dataset("pdf-samples", "pdflatex-outline.pdf")], folder)
    fx.image_only_pdf(folder, "scanned.pdf")
    return folder


def test_materializes_every_document_on_duckdb_and_postgres(corpus, settings_factory, pg_url, tmp_path):
    results = {}
    for backend, overrides in (("duckdb", {}), ("postgres", {"database_url": pg_url})):
        outcomes, store, instance = ingest(settings_factory(**overrides), [corpus])
        failed = {k: o.error for k, o in outcomes.items() if not o.success}
        assert set(failed) == {"corpus/libreoffice-writer-password.pdf", "corpus/scanned.pdf"}, failed
        assert "libreoffice-writer-password.pdf: PDF is password-protected" in failed[
            "corpus/libreoffice-writer-password.pdf"]
        assert "no extractable text" in failed["corpus/scanned.pdf"]
        (version,) = [v["index_version"] for v in store.corpus.index_versions()]
        docs = {d.doc_id: d.n_chunks for d in store.corpus.documents(version)}
        assert set(docs) == {k for k, o in outcomes.items() if o.success}
        assert all(docs[k] == outcomes[k].chunks > 0 for k in docs)
        assert "corpus/libreoffice-writer-password.pdf" not in {d for d in docs}
        results[backend] = (version, docs)
        # Every partition's materializations carry metadata.
        record = instance.get_latest_materialization_event(
            dg.AssetKey("chunk_embeddings"))
        assert record is not None
        metadata = record.asset_materialization.metadata
        assert metadata["index_version"].value == version
        assert metadata["chunks"].value > 0 and metadata["embedder"].value == "st:all-MiniLM-L6-v2"
    assert results["duckdb"] == results["postgres"], "identical chunking on both stores"


def test_reingest_unchanged_document_changes_nothing(tmp_path, samples_dir, settings_factory):
    settings = settings_factory()
    paths = [samples_dir / "release_notes.txt"]
    outcomes, store, _ = ingest(settings, paths)
    (version,) = [v["index_version"] for v in store.corpus.index_versions()]
    before = [(c.content_hash, c.header) for c in store.corpus.chunks(version)]
    outcomes, store, _ = ingest(settings, paths)
    assert all(o.success for o in outcomes.values())
    assert [(c.content_hash, c.header) for c in store.corpus.chunks(version)] == before


def test_header_source_auto_falls_back_to_structural_with_warning(tmp_path, samples_dir, settings_factory):
    settings = settings_factory(header_source="auto", llm_base_urls="")
    outcomes, store, instance = ingest(settings, [samples_dir / "rate_limiter.py"])
    assert all(o.success for o in outcomes.values())
    event = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers"))
    metadata = event.asset_materialization.metadata
    assert metadata["header_source"].value == "structural"
    assert "no LLM endpoint configured" in metadata["source_warning"].value
    (version,) = [v["index_version"] for v in store.corpus.index_versions()]
    headers = [c.header for c in store.corpus.chunks(version)]
    assert any("Defines TokenBucket" in h for h in headers)


def test_header_source_none_and_index_version_differs(tmp_path, samples_dir, settings_factory):
    structural = settings_factory()
    none = settings_factory(header_source="none")
    ingest(structural, [samples_dir / "release_notes.txt"])
    _, store, _ = ingest(none, [samples_dir / "release_notes.txt"])
    versions = store.corpus.index_versions()
    assert len(versions) == 2
    by_source = {v["fingerprint"]["header_source"]: v["index_version"] for v in versions}
    assert all(c.header == "" for c in store.corpus.chunks(by_source["none"]))


def registered(tmp_path, settings, name: str, text: str):
    """One file written and registered (as `ctx ingest` or the sensor does before its run): the file,
    its sources, the store and the instance."""
    doc = tmp_path / name
    doc.write_text(text)
    sources, _ = collect_sources([doc], inbox=Path(settings.inbox), source_root=tmp_path)
    store = build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    register_sources(store, instance, sources)
    return doc, sources, store, instance


def test_vanished_file_fails_with_its_name(tmp_path, settings_factory):
    settings = settings_factory()
    doc, sources, store, instance = registered(tmp_path, settings, "gone.md", "# Title\n\nSome text.\n")
    doc.unlink()
    (outcome,) = ingest_partitions(build_definitions(settings), instance, sources, log_level="ERROR")
    assert not outcome.success
    assert "gone.md: file no longer exists" in outcome.error
    assert store.corpus.count_chunks() == 0


def test_a_file_changed_after_registration_fails_before_its_headers(tmp_path, settings_factory):
    """The registered revision is what a run ingests: a file that changed since is refused right after
    parsing (no header is paid for), not at commit; the run for its new content ingests it."""
    settings = settings_factory()
    doc, sources, store, instance = registered(tmp_path, settings, "memo.md", "# Memo\n\nThe first text.\n")
    doc.write_text("# Memo\n\nThe second text.\n")
    defs = build_definitions(settings)
    (outcome,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
    assert not outcome.success and "memo.md: the file changed since it was registered" in outcome.error
    assert instance.fetch_materializations(dg.AssetKey("parsed_chunks"), limit=5).records == []
    assert store.corpus.count_chunks() == 0
    register_sources(store, instance, sources)  # what the sensor's next tick (or `ctx ingest` again) does
    (again,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
    assert again.success and store.corpus.count_chunks() > 0
