"""The persistent lexical index: BM25 in the store equals bm25s's scores, survives a restart,
follows a re-ingested document, and indexes documents stored before it existed."""

from __future__ import annotations

import random

import pytest

from contextual_assets.store import open_store
from contextual_assets.store.lexical import lexical_text, tokenize
from tests.integration.test_store_contract import make_chunks, put, record

WORDS = ("ledger invoice penalty clause mooring harbour tariff rateLimiter token_bucket refill quota delay "
         "shipment carrier warranty breach notice cure period escrow").split()


@pytest.fixture(params=["duckdb", "postgres"])
def store_factory(request, tmp_path):
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    opened = []

    def factory():
        s = open_store(url, tmp_path / "store.duckdb")
        opened.append(s)
        return s
    yield factory
    for s in opened:
        s.close()


def _corpus(seed: int = 7) -> dict[str, list[str]]:
    rng = random.Random(seed)
    return {f"doc{d}.txt": [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for _ in range(6)]
            for d in range(8)}


def test_store_bm25_equals_bm25s(store_factory):
    import bm25s

    store = store_factory()
    corpus = _corpus()
    chunks = [c for doc, texts in corpus.items() for c in put(store, doc, texts)]
    reference = bm25s.BM25()
    reference.index([tokenize(lexical_text(c.title, c.section_path, c.header, c.text)) or ["\u2400"] for c in chunks],
                    show_progress=False)
    for query in ("penalty clause", "token bucket refill", "RateLimiter quota quota", "escrow notice period"):
        expected = reference.get_scores(tokenize(query))
        ours = {(d, o): s for d, o, s in store.search.lexical_top(query, "iv-a", len(chunks))}
        for chunk, score in zip(chunks, expected):
            assert ours.get((chunk.doc_id, chunk.ordinal), 0.0) == pytest.approx(float(score), rel=1e-4, abs=1e-5)
        ranked = store.search.lexical(query, "iv-a", 5)
        assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
        assert ranked[0].score == pytest.approx(float(max(expected)), rel=1e-4)


def test_lexical_index_survives_a_restart_and_follows_a_reingested_document(store_factory):
    store = store_factory()
    put(store, "a.txt", ["the mooring fee is paid in florins", "nothing else here"])
    put(store, "b.txt", ["harbour tariff schedule"], offset=2)
    store.close()
    reopened = store_factory()  # a new process would open it the same way: nothing rebuilt in memory
    assert reopened.search.lexical("mooring florins", "iv-a", 1)[0].doc_id == "a.txt"
    put(reopened, "a.txt", ["the berth charge is paid in ducats"])
    assert reopened.search.lexical("mooring florins", "iv-a", 3) == []
    assert reopened.search.lexical("berth ducats", "iv-a", 1)[0].text == "the berth charge is paid in ducats"
    reopened.corpus.purge_document("a.txt")
    assert reopened.search.lexical("berth ducats", "iv-a", 3) == []
    assert reopened.search.lexical("harbour tariff", "iv-a", 1)[0].doc_id == "b.txt"


def test_documents_stored_before_the_lexical_index_are_indexed_on_first_search(store_factory):
    store = store_factory()
    store.corpus.register_index_version("iv-a", {"header_source": "structural"})
    chunks = make_chunks("old.txt", ["legacy warranty breach notice", "cure period of thirty days"])
    store.corpus.replace_document(record("old.txt", "iv-a", len(chunks)), chunks)
    # What a schema-4 store holds: chunks and documents, no postings, no token totals.
    with store.backend.transaction() as cur:
        store.backend.exec(cur, "DELETE FROM ctx_lexical_postings WHERE doc_id = ?", ("old.txt",))
        store.backend.exec(cur, "UPDATE ctx_documents SET lexical_tokens = NULL WHERE doc_id = ?", ("old.txt",))
    assert store.search.lexical("cure period", "iv-a", 1)[0].ordinal == 1
    assert store.search.ensure_lexical_index("iv-a") == 0  # already done, once
    rows = store.backend.query("SELECT count(*) FROM ctx_lexical_postings WHERE doc_id = ? AND term = ?",
                               ("old.txt", "cure"))
    assert rows[0][0] == 1


def test_postings_in_memory_rank_as_the_store(store_factory):
    """The search service's in-memory postings (LexicalSnapshot) return what the store's statement
    returns: same keys in the same order (ties by key, also where n cuts through equal scores), same
    scores, after a document was replaced and another purged."""
    store = store_factory()
    corpus = _corpus(seed=5)
    for doc, texts in corpus.items():
        put(store, doc, texts)
    for copy in ("copy-a.txt", "copy-b.txt", "copy-c.txt"):  # equal scores: only the key orders them
        put(store, copy, ["penalty clause escrow notice", "token bucket refill quota"])
    put(store, "doc1.txt", ["escrow breach cure escrow", "mooring harbour"])  # replaced
    store.corpus.purge_document("doc2.txt")
    snapshot = store.search.lexical_snapshot("iv-a")
    assert not any(d == "doc2.txt" for d, _ in snapshot.keys)
    queries = ["penalty clause", "token bucket refill", "escrow breach cure", "RateLimiter quota quota",
               "shipment carrier notice period", "penalty clause escrow notice", "unknownterm", "the of"]
    for query in queries:
        for n in (1, 2, 4, 7, 100):
            expected = store.search.lexical_top(query, "iv-a", n)
            got = snapshot.top(query, n)
            assert [(d, o) for d, o, _ in got] == [(d, o) for d, o, _ in expected], (query, n)
            assert [s for *_, s in got] == pytest.approx([s for *_, s in expected], rel=1e-12), (query, n)
    tied = snapshot.top("penalty clause escrow notice", 2)
    assert [d for d, _, _ in tied] == ["copy-a.txt", "copy-b.txt"] and tied[0][2] == pytest.approx(tied[1][2])
    assert store.search.lexical_snapshot("iv-none").top("penalty", 5) == []


def test_duckdb_compacted_postings_rank_as_the_uncompacted_ones(tmp_path, monkeypatch):
    """DuckDB compacts postings into one row per term. Compacted at every commit, then left with
    documents replaced, purged and added since (their compacted entries stale), it ranks every query
    and filter exactly as a store that never compacted."""
    from contextual_assets.models import ChunkFilter
    from contextual_assets.store.lexical_index import LexicalIndex

    corpus = _corpus(seed=11)
    never = open_store(None, tmp_path / "never.duckdb")
    compacted = open_store(None, tmp_path / "compacted.duckdb")
    monkeypatch.setattr(LexicalIndex, "COMPACT_MIN_ROWS", 10**9)
    for doc, texts in corpus.items():
        put(never, doc, texts)
    monkeypatch.setattr(LexicalIndex, "COMPACT_MIN_ROWS", 1)
    monkeypatch.setattr(LexicalIndex, "COMPACT_RATIO", 0.0)
    for doc, texts in corpus.items():
        put(compacted, doc, texts)
    assert compacted.backend.query("SELECT count(*) FROM ctx_lexical_postings")[0][0] == 0
    # One row per term of the version.
    assert compacted.backend.query("SELECT count(*), count(DISTINCT term) FROM ctx_lexical_terms")[0] == \
        (never.backend.query("SELECT count(DISTINCT term) FROM ctx_lexical_postings")[0][0],) * 2
    monkeypatch.setattr(LexicalIndex, "COMPACT_MIN_ROWS", 10**9)
    def entries_of(doc_id):
        return compacted.backend.query("SELECT count(*) FROM (SELECT unnest(doc_ids) AS d FROM ctx_lexical_terms) "
                                       "WHERE d = ?", (doc_id,))[0][0]

    assert entries_of("doc2.txt") > 0
    for store in (never, compacted):
        store.corpus.purge_document("doc2.txt")  # compacts again: no term of it stays behind
        put(store, "doc1.txt", ["escrow breach cure escrow", "mooring harbour"])  # replaced: stale entries
        put(store, "doc9.txt", ["penalty clause quota", "shipment carrier notice"])
    assert entries_of("doc2.txt") == 0
    assert entries_of("doc1.txt") > 0  # stale until the next compaction, and ignored
    assert compacted.backend.query("SELECT count(*) FROM ctx_lexical_postings")[0][0] > 0
    def same_ranking(query, where=None):
        expected = never.search.lexical_top(query, "iv-a", 50, where)
        got = compacted.search.lexical_top(query, "iv-a", 50, where)
        assert expected, (query, where)  # a query that finds nothing would prove nothing
        assert [(d, o) for d, o, _ in got] == [(d, o) for d, o, _ in expected], (query, where)
        assert [s for *_, s in got] == pytest.approx([s for *_, s in expected], rel=1e-9)
        if where is None:  # the service's in-memory postings, read from the compacted layout
            in_memory = compacted.search.lexical_snapshot("iv-a").top(query, 50)
            assert [(d, o) for d, o, _ in in_memory] == [(d, o) for d, o, _ in expected], query

    filters = [None, ChunkFilter(documents=["doc1.txt", "doc3.txt"]), ChunkFilter(path_prefix="doc"),
               ChunkFilter(section="S1"), ChunkFilter(page_from=2, page_to=3)]
    queries = ["penalty clause", "token bucket refill", "escrow breach cure", "mooring harbour quota",
               "RateLimiter quota quota", "shipment carrier notice period"]
    for query in queries:
        for where in filters:
            same_ranking(query, where)
    assert not any(d == "doc2.txt" for d, _, _ in compacted.search.lexical_top("ledger invoice", "iv-a", 100))
    assert {o for d, o, _ in compacted.search.lexical_top("escrow", "iv-a", 100) if d == "doc1.txt"} == {0}
    # The next compaction folds it all in: stale entries dropped, the recent rows moved.
    monkeypatch.setattr(LexicalIndex, "COMPACT_MIN_ROWS", 1)
    put(compacted, "doc10.txt", ["harbour tariff"])
    put(never, "doc10.txt", ["harbour tariff"])
    assert compacted.backend.query("SELECT count(*) FROM ctx_lexical_postings")[0][0] == 0
    # doc1's entries are its new chunks' only: two chunks, "escrow" in the first.
    assert compacted.backend.query(
        "SELECT ords FROM (SELECT unnest(doc_ids) AS d, unnest(ordinals) AS ords FROM ctx_lexical_terms "
        "WHERE term = 'escrow') WHERE d = 'doc1.txt'") == [([0],)]
    for query in queries:
        same_ranking(query)
    never.close()
    compacted.close()
