"""Longest-first scheduling in the pipeline: a run's documents go to the header stage by estimated
header work, largest first, whatever their keys' order (the classic LPT rule: a long document that
sorts last must not start last and run alone at the end). Real parsing and a real DuckDB store; the
header source is the structural one, recording the order in which documents reach it."""

from __future__ import annotations

import threading

from contextual_assets.headers.structural import StructuralHeaderSource
from contextual_assets.ingest.pipeline.document_pipeline import (
    DocumentPipeline,
    PipelineSettings,
    header_work,
    largest_first,
)
from contextual_assets.models import SourceRecord
from contextual_assets.parsing.tokens import token_counter
from contextual_assets.store import open_store


class RecordingHeaders(StructuralHeaderSource):
    def __init__(self) -> None:
        self.order: list[str] = []
        self._lock = threading.Lock()

    def generate(self, requests):
        with self._lock:
            self.order.append(requests[0].chunk.doc_id)
        return super().generate(requests)


class Embedder:  # the embedding is not under test: a constant vector keeps the test fast
    identity = "constant"

    def warm(self) -> None:
        pass

    def embed(self, texts):
        return [[1.0, 0.0] for _ in texts]


def write_note(path, sections: int) -> None:
    body = "\n\n".join(f"## Part {s}\n\n" + " ".join(f"word{s}x{w}" for w in range(180)) for s in range(sections))
    path.write_text(f"# {path.stem}\n\n{body}\n")


def test_documents_reach_the_header_stage_largest_first(tmp_path):
    sizes = {"a_note": 2, "b_note": 4, "c_note": 1, "d_note": 3, "zz_long_report": 30}
    store = open_store(None, tmp_path / "index.duckdb")
    for key, sections in sizes.items():
        path = tmp_path / f"{key}.md"
        write_note(path, sections)
        store.corpus.register_source(SourceRecord(doc_id=key, path=str(path)))
    headers = RecordingHeaders()
    pipeline = DocumentPipeline(
        store=store, counter=token_counter(), chunk_tokens=200, max_bytes=10**7, max_pdf_pages=100,
        header_source=headers, context_tokens=400, embedder=Embedder(), index_version="iv-test",
        fingerprint={"test": "lpt"}, settings=PipelineSettings(max_documents_in_flight=1, parse_ahead=4),
    )
    events = list(pipeline.run(sorted(sizes)))  # key order: the long report last
    store.close()
    assert sorted(e.key for e in events if e.kind == "committed") == sorted(sizes)
    assert headers.order == sorted(sizes, key=lambda k: -sizes[k])


def test_largest_first_is_stable_and_header_work_counts_answers_first():
    size = {"a": 10, "b": 30, "c": 10, "d": 20}
    assert largest_first(["a", "b", "c", "d"], size.__getitem__) == ["b", "d", "a", "c"]

    from contextual_assets.headers.base import HeaderRequest
    from contextual_assets.models import Chunk

    def request(tokens: int, context: str = "") -> HeaderRequest:
        chunk = Chunk(doc_id="d", source_doc="d", title="t", ordinal=0, text="x", token_count=tokens,
                      content_hash="h")
        return HeaderRequest(chunk=chunk, before=[context] if context else [])

    assert header_work([request(100, "y" * 400)]) == (1, 200)
    # Three short chunks outweigh one long one: each is an answer to decode.
    assert header_work([request(10)] * 3) > header_work([request(500, "y" * 4000)])
