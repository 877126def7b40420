"""One contract, two back-ends: DuckDB (embedded) and Postgres + pgvector (real, via pgserver)."""

from __future__ import annotations

import math

import pytest

from contextual_assets.models import (
    DocumentRecord,
    EmbeddedChunk,
    SourceRecord,
    content_hash,
)
from contextual_assets.store import open_store
from contextual_assets.store.migrations import LATEST_SCHEMA

DIM = 8


@pytest.fixture(params=["duckdb", "postgres"])
def store(request, tmp_path):
    if request.param == "duckdb":
        s = open_store(None, tmp_path / "store.duckdb")
    else:
        s = open_store(request.getfixturevalue("pg_url"), tmp_path / "unused.duckdb")
    yield s
    s.close()


def unit(index: int, dim: int = DIM) -> list[float]:
    vector = [0.0] * dim
    vector[index % dim] = 1.0
    vector[(index + 1) % dim] = 0.3
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


def make_chunks(doc_id: str, texts: list[str], offset: int = 0) -> list[EmbeddedChunk]:
    return [
        EmbeddedChunk(
            doc_id=doc_id, source_doc=doc_id, title=f"Title of {doc_id}", ordinal=i, section_path=["Part", f"S{i}"],
            page_start=i + 1, page_end=i + 1, text=text, token_count=len(text.split()), content_hash=content_hash(text),
            header=f"header {i}", header_source="structural", header_model="structural-v1",
            embedding=unit(i + offset),
        )
        for i, text in enumerate(texts)
    ]


def record(doc_id: str, version: str, n: int) -> DocumentRecord:
    return DocumentRecord(doc_id=doc_id, index_version=version, source_path=f"/in/{doc_id}", kind="text",
                          title=f"Title of {doc_id}", file_hash="ab" * 32, n_chunks=n, updated_at="")


def put(store, doc_id, texts, version="iv-a", offset=0):
    store.corpus.register_index_version(version, {"header_source": "structural"})
    chunks = make_chunks(doc_id, texts, offset)
    store.corpus.replace_document(record(doc_id, version, len(chunks)), chunks)
    return chunks


def test_migrations_are_versioned_and_idempotent(store):
    assert store.schema_version() == LATEST_SCHEMA
    assert store.migrate() == LATEST_SCHEMA
    assert store.migrate() == LATEST_SCHEMA


def test_replace_document_swaps_all_chunks(store):
    put(store, "a.txt", ["alpha one", "alpha two", "alpha three"])
    put(store, "b.txt", ["beta one"], offset=3)
    assert store.corpus.count_chunks("iv-a") == 4
    put(store, "a.txt", ["alpha new"])
    assert store.corpus.count_chunks("iv-a", "a.txt") == 1
    assert [c.text for c in store.corpus.chunks("iv-a", "a.txt")] == ["alpha new"]
    assert store.corpus.count_chunks("iv-a", "b.txt") == 1
    docs = {d.doc_id: d for d in store.corpus.documents("iv-a")}
    assert docs["a.txt"].n_chunks == 1


def test_failed_replace_leaves_previous_version(store, monkeypatch):
    put(store, "a.txt", ["old one", "old two"])
    original = type(store.backend).insert_chunks

    def crash_midway(self, cursor, chunks, index_version):
        original(self, cursor, chunks[:1], index_version)  # half the rows written, then the crash
        raise RuntimeError("simulated crash during commit")

    monkeypatch.setattr(type(store.backend), "insert_chunks", crash_midway)
    with pytest.raises(RuntimeError, match="simulated crash"):
        store.corpus.replace_document(record("a.txt", "iv-a", 3), make_chunks("a.txt", ["new 1", "new 2", "new 3"]))
    monkeypatch.setattr(type(store.backend), "insert_chunks", original)
    assert [c.text for c in store.corpus.chunks("iv-a", "a.txt")] == ["old one", "old two"]
    assert store.corpus.documents("iv-a")[0].n_chunks == 2


def test_index_versions_are_isolated(store):
    put(store, "a.txt", ["shared text"], version="iv-a")
    put(store, "a.txt", ["shared text", "more"], version="iv-b")
    assert store.corpus.count_chunks("iv-a") == 1 and store.corpus.count_chunks("iv-b") == 2
    versions = {v["index_version"]: v for v in store.corpus.index_versions()}
    assert versions["iv-b"]["chunks"] == 2 and versions["iv-a"]["documents"] == 1
    hits = store.search.lexical("more", "iv-a", 5)
    assert hits == []


def test_purge_removes_every_version_and_source(store):
    store.corpus.register_source(SourceRecord(doc_id="a.txt", path="/in/a.txt", file_hash="x"))
    put(store, "a.txt", ["one"], version="iv-a")
    put(store, "a.txt", ["one"], version="iv-b")
    assert store.corpus.purge_document("a.txt") == 2
    assert store.corpus.count_chunks() == 0 and store.corpus.get_source("a.txt") is None


def test_sources_registry(store):
    store.corpus.register_source(SourceRecord(doc_id="d/x.pdf", path="/in/d/x.pdf", file_hash="1"))
    store.corpus.register_source(SourceRecord(doc_id="d/x.pdf", path="/in/d/x.pdf", file_hash="2"))
    assert store.corpus.get_source("d/x.pdf").file_hash == "2"
    assert [s.doc_id for s in store.corpus.list_sources()] == ["d/x.pdf"]


def test_register_sources_in_bulk(store):
    store.corpus.register_source(SourceRecord(doc_id="k0", path="/in/old", file_hash="old"))
    records = [SourceRecord(doc_id=f"k{i}", path=f"/in/k{i}", file_hash=f"{i}") for i in range(1200)]
    # More than one batch of 500; a repeated doc_id keeps its last record; an existing one is replaced.
    store.corpus.register_sources(records + [SourceRecord(doc_id="k7", path="/in/k7-new", file_hash="new")])
    sources = {s.doc_id: s for s in store.corpus.list_sources()}
    assert len(sources) == 1200
    assert (sources["k0"].path, sources["k0"].file_hash) == ("/in/k0", "0")
    assert (sources["k7"].path, sources["k7"].file_hash) == ("/in/k7-new", "new")
    assert sources["k1199"].file_hash == "1199"
    store.corpus.register_sources([])
    assert len(store.corpus.list_sources()) == 1200


def test_dense_lexical_hybrid_search(store):
    put(store, "a.txt", ["the penalty for late delivery is five percent", "office hours are nine to five",
                         "TokenBucket refills at a fixed rate"])
    put(store, "b.txt", ["unrelated text about gardening", "compost needs nitrogen"], offset=3)
    dense = store.search.dense(unit(2), "iv-a", 3)
    assert dense[0].text == "TokenBucket refills at a fixed rate"
    assert dense[0].score == pytest.approx(1.0, abs=1e-4)
    assert [h.score for h in dense] == sorted([h.score for h in dense], reverse=True)
    lexical = store.search.lexical("token bucket", "iv-a", 3)
    assert lexical[0].text.startswith("TokenBucket"), "identifiers are split for lexical search"
    assert store.search.lexical("penalty late", "iv-a", 1)[0].doc_id == "a.txt"
    hybrid = store.search.hybrid("compost nitrogen", unit(4), "iv-a", 3)
    assert hybrid[0].text == "compost needs nitrogen"
    hit = hybrid[0]
    assert hit.section_path == ["Part", "S1"] and hit.page_start == 2 and hit.header == "header 1"


def test_search_sees_updates(store):
    put(store, "a.txt", ["first text about apples"])
    assert store.search.lexical("apples", "iv-a", 1)
    put(store, "a.txt", ["now about pears"])
    assert store.search.lexical("apples", "iv-a", 1) == []
    assert store.search.lexical("pears", "iv-a", 1)[0].text == "now about pears"


def test_hostile_identifiers_are_data(store):
    hostile = "x'; DROP TABLE ctx_chunks; --\u00e9\u062d \"q\".pdf"
    store.corpus.register_source(SourceRecord(doc_id=hostile, path=f"/in/{hostile}", file_hash="h"))
    put(store, hostile, ["robert'); DROP TABLE students;-- text"])
    assert store.corpus.get_source(hostile).path == f"/in/{hostile}"
    assert store.corpus.count_chunks("iv-a", hostile) == 1
    assert store.search.lexical("students", "iv-a", 1)[0].doc_id == hostile
    assert store.corpus.purge_document(hostile) == 1


def test_dimension_mismatch_is_a_clear_error(store):
    from contextual_assets.errors import StoreError

    put(store, "a.txt", ["some text"])
    with pytest.raises(StoreError, match="dimension"):
        store.search.dense([1.0, 0.0], "iv-a", 1)


def test_aliases_promote_with_history_and_roll_back(store):
    from contextual_assets.errors import StoreError

    assert store.aliases.get("production") is None
    assert store.aliases.set("production", "iv-a", "first") is None
    assert store.aliases.set("production", "iv-b", "better") == "iv-a"
    assert store.aliases.get("production") == "iv-b"
    assert store.aliases.rollback("production") == ("iv-a", "iv-b")
    assert store.aliases.get("production") == "iv-a"
    assert [h["action"] for h in store.aliases.history("production")] == ["promote", "promote", "rollback"]
    with pytest.raises(StoreError, match="no previous version"):
        store.aliases.rollback("staging")


def test_eval_runs_round_trip(store):
    run = {"run_id": "r1", "index_version": "iv-a", "evaluator_id": "ev1", "evaluator": {"embedder": "x"},
           "gold_sha256": "g", "metrics": {"hybrid": {"mrr": 0.5}}}
    task = {"task_id": "t1", "mode": "hybrid", "status": "living", "first_rank": 2, "pass_at_5": 1.0,
            "pass_at_10": 1.0, "pass_at_20": 1.0, "reciprocal_rank": 0.5, "ndcg_at_10": 0.63}
    store.eval_runs.save(run, [task])
    store.eval_runs.set_gate("r1", {"passed": True})
    latest = store.eval_runs.latest("iv-a", "ev1")
    assert latest["metrics"] == {"hybrid": {"mrr": 0.5}} and latest["gate"] == {"passed": True}
    assert store.eval_runs.latest("iv-a", "other") is None
    assert store.eval_runs.tasks("r1") == [task]
    assert store.eval_runs.get("r1")["gate"] == {"passed": True} and store.eval_runs.get("missing") is None


def test_per_document_evaluations_are_replaced_per_candidate_and_document(store):
    def record(doc_id: str, version: str = "iv-a", passed: bool = True, reasons=()) -> dict:
        return {"index_version": version, "doc_id": doc_id, "run_id": "r1", "baseline_run_id": None,
                "production_version": "iv-p", "basis": {"candidate_revision": ["1", "x"], "gold_sha256": "g"},
                "task_ids": ["t1", "t'2"], "passed": passed, "reasons": list(reasons),
                "metrics": {"tasks": 2, "candidate_pass_at_20": 0.5}}

    store.eval_runs.save_documents([record("a.md"), record("b.md"), record("a.md", "iv-b")])
    store.eval_runs.save_documents([record("a.md", passed=False, reasons=["document a.md: 2 of its 2 tasks"])])
    saved = store.eval_runs.documents("iv-a")
    assert sorted(saved) == ["a.md", "b.md"] and sorted(store.eval_runs.documents("iv-b")) == ["a.md"]
    assert saved["a.md"]["passed"] is False and saved["a.md"]["reasons"] == ["document a.md: 2 of its 2 tasks"]
    assert saved["b.md"]["passed"] is True and saved["b.md"]["task_ids"] == ["t1", "t'2"]
    assert saved["b.md"]["basis"] == record("b.md")["basis"] and saved["b.md"]["baseline_run_id"] is None
    assert store.eval_runs.documents("iv-none") == {}


def test_index_version_recipe_and_coverage(store, tmp_path):
    from contextual_assets.lifecycle.coverage import coverage_of, live_documents, production_lag

    recipe = {"headers": {"source": "structural"}, "chunk_tokens": 60}
    store.corpus.register_index_version("iv-a", {"header_source": "structural"}, recipe)
    store.corpus.register_index_version("iv-a", {"header_source": "structural"})  # a later run without one keeps it
    assert store.corpus.index_version("iv-a")["recipe"] == recipe and store.corpus.index_version("iv-zz") is None
    assert {v["index_version"]: v["recipe"] for v in store.corpus.index_versions()} == {"iv-a": recipe}

    for doc in ("a.txt", "b.txt", "c.txt", "gone.txt"):
        (tmp_path / doc).write_text(doc)
        store.corpus.register_source(SourceRecord(doc_id=doc, path=str(tmp_path / doc), file_hash="ab" * 32))
    (tmp_path / "gone.txt").unlink()  # a registered file that no longer exists is not live
    put(store, "a.txt", ["alpha"], version="iv-a")
    put(store, "b.txt", ["beta"], version="iv-a")
    store.corpus.register_source(SourceRecord(doc_id="b.txt", path=str(tmp_path / "b.txt"),
                                              file_hash="cd" * 32))  # edited
    coverage = coverage_of(store, "iv-a", live_documents(store))
    assert (coverage.live, coverage.covered, coverage.missing, coverage.outdated) == (3, 1, ["c.txt"], ["b.txt"])
    assert coverage.summary() == ("candidate iv-a covers 1 of 3 live documents; 1 missing (c.txt); "
                                  "1 at an older revision (b.txt)")
    assert production_lag(store) is None
    store.aliases.set("production", "iv-a", "test")
    assert production_lag(store).missing == ["c.txt"]


def test_commit_requires_the_current_source_when_asked(store):
    from contextual_assets.errors import StaleDocumentError

    chunks = make_chunks("a.txt", ["new text"])
    with pytest.raises(StaleDocumentError, match="removed while this run worked"):
        store.corpus.replace_document(record("a.txt", "iv-a", 1), chunks, require_current_source=True)
    store.corpus.register_source(SourceRecord(doc_id="a.txt", path="/in/a.txt", file_hash="cd" * 32))
    with pytest.raises(StaleDocumentError, match="changed while this run worked"):
        store.corpus.replace_document(record("a.txt", "iv-a", 1), chunks, require_current_source=True)
    store.corpus.register_source(SourceRecord(doc_id="a.txt", path="/in/a.txt", file_hash="ab" * 32))
    store.corpus.register_index_version("iv-a", {})
    store.corpus.register_index_version("iv-a", {})  # idempotent under races
    store.corpus.replace_document(record("a.txt", "iv-a", 1), chunks, require_current_source=True)
    assert store.corpus.count_chunks("iv-a") == 1


def test_alias_compare_and_set(store):
    from contextual_assets.errors import StoreError

    from contextual_assets.errors import AliasMoved

    store.aliases.set("production", "iv-a")
    with pytest.raises(StoreError, match="moved to iv-a") as moved:
        store.aliases.set("production", "iv-c", expected="iv-b")
    assert isinstance(moved.value, AliasMoved) and moved.value.current == "iv-a"
    assert store.aliases.set("production", "iv-c", expected="iv-a") == "iv-a"


def test_postgres_hnsw_ef_search(pg_url):
    """The HNSW candidate list: 200 by default for top-10 (recall@10 >= 0.95 in bench.load), 4k for wide
    queries, capped at pgvector's 1000; a store opened with another floor uses it and still finds the best."""
    from contextual_assets.store.postgres_store import PostgresChunkStore

    store = PostgresChunkStore(pg_url)
    try:
        assert [store.backend.ef_search_for(k) for k in (10, 100, 400)] == [200, 400, 1000]
    finally:
        store.close()
    store = PostgresChunkStore(pg_url, ef_search=16)
    try:
        store.migrate()
        put(store, "a.txt", ["alpha", "beta", "gamma"])
        assert store.backend.ef_search_for(1) == 16
        assert store.search.dense(unit(1), "iv-a", 1)[0].text == "beta"
    finally:
        store.close()


def test_postgres_hnsw_ef_search_follows_the_servers_configuration(pg_url):
    """An operator who sets hnsw.ef_search on the database (or in DATABASE_URL's options) gets at least
    that candidate list: more recall on their data for a few ms, with no setting of ours."""
    from urllib.parse import urlsplit

    import psycopg

    from contextual_assets.store.postgres_store import PostgresChunkStore

    database = urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {database} SET hnsw.ef_search = 500")
    store = PostgresChunkStore(pg_url)
    try:
        store.migrate()
        put(store, "a.txt", ["alpha", "beta", "gamma"])
        assert store.search.dense(unit(2), "iv-a", 1)[0].text == "gamma"
        assert [store.backend.ef_search_for(k) for k in (10, 200, 400)] == [500, 800, 1000]
    finally:
        store.close()


def test_a_zero_vector_is_never_a_dense_hit(store):
    chunks = put(store, "z.txt", ["no direction", "some direction"])
    zero = chunks[0].model_copy(update={"embedding": [0.0] * DIM})
    store.corpus.replace_document(record("z.txt", "iv-a", 2), [zero, chunks[1]])
    hits = store.search.dense(unit(1), "iv-a", 5)
    assert [h.text for h in hits] == ["some direction"]


def test_several_documents_commit_in_one_transaction_all_or_none(store):
    from contextual_assets.errors import StaleDocumentError

    store.corpus.register_index_version("iv-a", {})
    for doc_id in ("a.txt", "b.txt", "c.txt"):
        store.corpus.register_source(SourceRecord(doc_id=doc_id, path=f"/in/{doc_id}", file_hash="ab" * 32))
    batch = [(record("a.txt", "iv-a", 2), make_chunks("a.txt", ["a one", "a two"])),
             (record("b.txt", "iv-a", 1), make_chunks("b.txt", ["b one"], offset=2))]
    store.corpus.replace_documents(batch, require_current_source=True)
    assert (store.corpus.count_chunks("iv-a") == 3
            and {d.doc_id for d in store.corpus.documents("iv-a")} == {"a.txt", "b.txt"})
    # One stale document in the batch: nothing of the batch is committed, not even the good one.
    store.corpus.register_source(SourceRecord(doc_id="b.txt", path="/in/b.txt", file_hash="cd" * 32))
    stale = [(record("c.txt", "iv-a", 1), make_chunks("c.txt", ["c one"], offset=3)),
             (record("b.txt", "iv-a", 1), make_chunks("b.txt", ["b new"], offset=4))]
    with pytest.raises(StaleDocumentError, match="changed while this run worked"):
        store.corpus.replace_documents(stale, require_current_source=True)
    assert ({d.doc_id for d in store.corpus.documents("iv-a")} == {"a.txt", "b.txt"}
            and store.corpus.count_chunks("iv-a") == 3)


def test_the_store_is_parts_over_one_backend(store):
    """Each part offers its interface and nothing else reaches it through the container; the in-memory
    matrix is an explicit capability of the search part (DuckDB's), not an attribute to probe for."""
    from typing import Protocol

    from contextual_assets.store import Aliases, Corpus, EvalRuns, HeaderCache, InboxState, Search

    parts = {"corpus": Corpus, "search": Search, "aliases": Aliases, "eval_runs": EvalRuns,
             "inbox_state": InboxState, "header_cache": HeaderCache}
    protocol_members = set(dir(Protocol))
    for name, interface in parts.items():
        part = getattr(store, name)
        members = {m for m in [*vars(interface), *interface.__annotations__] if not m.startswith("_")}
        members -= protocol_members
        assert members and all(hasattr(part, m) for m in members), name
        assert not any(hasattr(store, m) for m in members - set(parts)), f"the container re-exposes {name}"
        assert part._backend is store.backend
    assert (store.search.embedding_matrix is not None) == (store.dialect == "duckdb")
    if store.search.embedding_matrix is not None:
        put(store, "a.txt", ["alpha", "beta"])
        keys, matrix = store.search.embedding_matrix("iv-a")
        assert sorted(keys) == [("a.txt", 0), ("a.txt", 1)] and matrix.shape == (2, DIM)


def test_header_cache_writes_many_rows_and_the_latest_write_of_a_key_wins(store):
    """More rows than one statement carries, a key twice in one write (the later row wins) and a key
    written again later; headers are data, whatever characters they hold."""
    items = [(f"key-{i}", f"header {i} with ? and '$1' in it", "model-a") for i in range(600)]
    items.append(("key-7", "header 7, second thought", "model-b"))
    store.header_cache.cache_headers(items)
    found = store.header_cache.cached_headers([f"key-{i}" for i in range(600)] + ["absent"])
    assert len(found) == 600 and "absent" not in found
    assert found["key-599"] == "header 599 with ? and '$1' in it"
    assert found["key-7"] == "header 7, second thought"
    store.header_cache.cache_headers([("key-8", "rewritten", "model-c")])
    assert store.header_cache.cached_headers(["key-8"]) == {"key-8": "rewritten"}


def test_header_cache_writes_from_many_threads_are_grouped_and_all_land(store, monkeypatch):
    """Documents in flight cache their headers at once: rows arriving while a transaction is written go
    into the next one together (fewer transactions than calls, none holding more than one caller's turn),
    and each caller returns once its rows are in."""
    import threading
    import time as time_module

    cache = store.header_cache
    real_write, writes = cache._write, []

    def slow_write(rows):  # a transaction that takes a while, as DuckDB's does under load
        writes.append(len(rows))
        time_module.sleep(0.05)
        real_write(rows)

    monkeypatch.setattr(cache, "_write", slow_write)
    threads = [threading.Thread(target=cache.cache_headers, args=([(f"t{t}-{i}", f"h{t}-{i}", "m") for i in range(3)],))
               for t in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert sum(writes) == 72 and len(writes) < 24, writes
    assert len(cache.cached_headers([f"t{t}-{i}" for t in range(24) for i in range(3)])) == 72


def test_a_grouped_header_cache_write_that_fails_fails_only_the_caller_whose_rows_fail(store, monkeypatch):
    """Two callers' rows wait together behind a slow write; the grouped write fails on one caller's row:
    each caller's rows are written alone, the good ones land and only the bad caller raises."""
    import threading
    import time as time_module

    cache = store.header_cache
    real_write, first_started = cache._write, threading.Event()

    def write(rows):
        if any(key == "slow" for key, _, _ in rows):
            first_started.set()
            time_module.sleep(0.3)  # the next two callers queue meanwhile
        if any(key.startswith("bad") for key, _, _ in rows):
            raise RuntimeError("refused row")
        real_write(rows)

    monkeypatch.setattr(cache, "_write", write)
    outcome: dict[str, BaseException | None] = {}

    def call(name, rows):
        try:
            cache.cache_headers(rows)
            outcome[name] = None
        except BaseException as exc:  # noqa: BLE001
            outcome[name] = exc

    leader = threading.Thread(target=call, args=("leader", [("slow", "h", "m")]))
    leader.start()
    assert first_started.wait(10)
    others = [threading.Thread(target=call, args=(name, rows)) for name, rows in
              (("good", [("good-1", "h", "m"), ("good-2", "h", "m")]), ("bad", [("bad-1", "h", "m")]))]
    for thread in others:
        thread.start()
    for thread in [leader, *others]:
        thread.join(timeout=30)
    assert outcome["leader"] is None and outcome["good"] is None
    assert isinstance(outcome["bad"], RuntimeError)
    assert cache.cached_headers(["slow", "good-1", "good-2", "bad-1"]) == {"slow": "h", "good-1": "h", "good-2": "h"}


# ---- filters: applied inside each ranking, before its top k ------------------------------------------

FILTER_DOCS = ["contracts/a.pdf", "contracts_old/b.pdf", "contractsX/e.txt", "memos/c.txt"]
SECTIONS = [["Agreement", "Termination"], ["Agreement", "Payment"], ['He said "stop"'], []]


def put_filter_corpus(store) -> list[EmbeddedChunk]:
    """Four documents of eight chunks, random vectors (no ties), sections and pages varied."""
    import random

    rng = random.Random(7)
    store.corpus.register_index_version("iv-f", {"header_source": "structural"})
    every = []
    for d, doc_id in enumerate(FILTER_DOCS):
        chunks = []
        for i in range(8):
            text = f"clause {i} termination notice period {'payment ' * (i % 3)}of {doc_id}"
            vector = [rng.gauss(0, 1) for _ in range(DIM)]
            norm = math.sqrt(sum(v * v for v in vector))
            pages = (None, None) if doc_id.endswith(".txt") else (i + 1, i + 1 + (i % 2))
            chunks.append(EmbeddedChunk(
                doc_id=doc_id, source_doc=doc_id, title=doc_id, ordinal=i, section_path=SECTIONS[(i + d) % 4],
                page_start=pages[0], page_end=pages[1], text=text, token_count=len(text.split()),
                content_hash=content_hash(text), header="", header_source="structural", header_model="s",
                embedding=[v / norm for v in vector]))
        store.corpus.replace_document(record(doc_id, "iv-f", len(chunks)), chunks)
        every += chunks
    return every


def admits(where, chunk) -> bool:
    """The filter's meaning, written apart from the SQL it is checked against."""
    if where.documents and chunk.doc_id not in where.documents:
        return False
    if where.path_prefix and not chunk.doc_id.startswith(where.path_prefix):
        return False
    if where.section and where.section not in chunk.section_path:
        return False
    end = chunk.page_end if chunk.page_end is not None else chunk.page_start
    if where.page_from is not None and (end is None or end < where.page_from):
        return False
    if where.page_to is not None and (chunk.page_start is None or chunk.page_start > where.page_to):
        return False
    return True


FILTERS = [
    {"documents": ["contracts/a.pdf", "memos/c.txt"]},
    {"path_prefix": "contracts_"},  # `_` is a literal: contractsX/ does not match
    {"path_prefix": "contracts/"},
    {"section": "Termination"},
    {"section": 'He said "stop"'},
    {"section": "Term"},  # a heading matches whole, never a part of one
    {"page_from": 3, "page_to": 4},
    {"page_from": 6},
    {"path_prefix": "contracts", "section": "Payment", "page_to": 5},
    {"documents": ["nowhere.pdf"]},
]


@pytest.mark.parametrize("spec", FILTERS, ids=[str(f) for f in FILTERS])
def test_filters_apply_before_the_top_k(store, spec):
    from contextual_assets.models import ChunkFilter

    chunks = put_filter_corpus(store)
    where = ChunkFilter(**spec)
    passing = [c for c in chunks if admits(where, c)]
    query = chunks[5].embedding
    k = 3
    # Dense: exactly the k nearest of the chunks that pass (ranked after filtering, not filtered after).
    expected = sorted(passing, key=lambda c: -sum(a * b for a, b in zip(c.embedding, query)))[:k]
    got = store.search.dense_top(query, "iv-f", k, where)
    assert [(d, o) for d, o, _ in got] == [(c.doc_id, c.ordinal) for c in expected]
    # Lexical: the filtered chunks keep the scores they have unfiltered (the version's statistics).
    unfiltered = store.search.lexical_top("termination payment", "iv-f", len(chunks))
    allowed = {(c.doc_id, c.ordinal) for c in passing}
    want = [(d, o, s) for d, o, s in unfiltered if (d, o) in allowed][:k]
    got_lexical = store.search.lexical_top("termination payment", "iv-f", k, where)
    assert [(d, o) for d, o, _ in got_lexical] == [(d, o) for d, o, _ in want]
    assert [s for *_, s in got_lexical] == pytest.approx([s for *_, s in want])
    # Hybrid: k hits when k chunks pass, every one of them passing.
    hits = store.search.hybrid("termination payment", query, "iv-f", k, where=where)
    assert len(hits) == min(k, len(passing))
    assert all(admits(where, h) for h in hits)
    if spec == {"path_prefix": "contracts_"}:
        assert {h.doc_id for h in hits} == {"contracts_old/b.pdf"}
    if spec in ({"section": "Term"}, {"documents": ["nowhere.pdf"]}):
        assert passing == [] and got == [] and hits == []
    else:
        assert passing, "each other filter matches some chunks"


def test_a_page_range_must_run_forwards():
    from pydantic import ValidationError

    from contextual_assets.models import ChunkFilter

    with pytest.raises(ValidationError, match="page_from"):
        ChunkFilter(page_from=5, page_to=2)
    assert ChunkFilter().is_empty() and not ChunkFilter(page_to=2).is_empty()


def test_documents_of_some_ids_only(store):
    put(store, "a.txt", ["alpha text"], version="iv-a")
    put(store, "b.txt", ["beta text"], version="iv-a", offset=1)
    put(store, "a.txt", ["alpha text"], version="iv-b")
    assert [(d.doc_id, d.index_version) for d in store.corpus.documents(doc_ids=["a.txt"])] == [
        ("a.txt", "iv-a"), ("a.txt", "iv-b")]
    assert [d.doc_id for d in store.corpus.documents("iv-a", doc_ids=["b.txt", "c.txt"])] == ["b.txt"]
    assert store.corpus.documents(doc_ids=[]) == []
