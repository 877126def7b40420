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
