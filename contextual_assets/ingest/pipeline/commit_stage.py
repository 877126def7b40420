"""The pipeline's commit stage: each finished document replaces its previous version in the store
atomically; documents that finish while a commit runs go in one transaction together."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from contextual_assets.embedding import Embedder
from contextual_assets.errors import StaleDocumentError
from contextual_assets.ingest.pipeline.state import DONE, PipelineState, error_text, take_batch
from contextual_assets.ingest.pipeline.types import DocumentJob, StageEvent
from contextual_assets.models import DocumentRecord, EmbeddedChunk, HeaderedChunk
from contextual_assets.store import ChunkStore

Rows = tuple[DocumentRecord, list[EmbeddedChunk]]


@dataclass
class CommitStage:
    state: PipelineState
    store: ChunkStore
    embedder: Embedder
    index_version: str
    fingerprint: dict[str, str]
    recipe: dict[str, Any] | None = None
    _registered: bool = field(default=False, init=False)  # the index version, with the first commit

    def run(self) -> None:
        state = self.state
        while True:
            job = state.to_commit.get()
            if job is DONE or state.stop.is_set():
                return
            # Documents that finished while the last commit ran go in one transaction (one open of a
            # DuckDB file, one commit): small documents would otherwise queue behind per-document opens.
            batch = take_batch(state.to_commit, job, state.settings.commit_batch_max)
            started = time.monotonic()
            if not self._register(batch):
                continue
            rows = [self._rows(job) for job in batch]
            if len(batch) > 1 and self._commit_together(batch, rows, started):
                continue
            self._commit_each(batch, rows)

    def _register(self, batch: list[DocumentJob]) -> bool:
        """The index version is registered with the first commit; False (the batch failed) if it cannot be."""
        try:
            if not self._registered:
                self.store.corpus.register_index_version(self.index_version, self.fingerprint, self.recipe)
                self._registered = True
        except Exception as exc:  # noqa: BLE001 - store down or locked past its retries
            for job in batch:
                self.state.fail(job.key, "commit", f"commit of {job.key}: {error_text(exc)}")
            return False
        return True

    def _commit_together(self, batch: list[DocumentJob], rows: list[Rows], started: float) -> bool:
        """One transaction for the batch; False if it failed (nothing of it is committed)."""
        try:
            self.store.corpus.replace_documents(rows, require_current_source=True)
        except Exception:  # noqa: BLE001 - one of them failed: commit each alone, to fail only it
            return False
        share = (time.monotonic() - started) / len(batch)
        for job in batch:
            self._committed(job, share, len(batch))
        return True

    def _commit_each(self, batch: list[DocumentJob], rows: list[Rows]) -> None:
        for job, (record, chunks) in zip(batch, rows):
            started = time.monotonic()
            try:
                self.store.corpus.replace_document(record, chunks, require_current_source=True)
            except StaleDocumentError as exc:
                self.state.fail(job.key, "commit", str(exc), retryable=False)
                continue
            except Exception as exc:  # noqa: BLE001 - store down or locked past its retries
                self.state.fail(job.key, "commit", f"commit of {job.key}: {error_text(exc)}")
                continue
            self._committed(job, time.monotonic() - started, 1)

    def _committed(self, job: DocumentJob, commit_s: float, together: int) -> None:
        self.state.jobs.pop(job.seq, None)  # its vectors are in the store now
        self.state.events.put(StageEvent("committed", job.key, metadata={
            "chunks": len(job.doc.chunks),
            "embedder": self.embedder.identity,
            "dimension": len(job.vectors[0]) if job.vectors else 0,
            "embed_s": round(job.embed_s, 3),
            "commit_s": round(commit_s, 3),
            "committed_with": together,  # documents in the same store transaction
            "admitted_to_committed_s": round(time.monotonic() - job.admitted_at, 3),
            "index_version": self.index_version,
            "store": self.store.location,
        }))

    def _rows(self, job: DocumentJob) -> Rows:
        chunks = [
            EmbeddedChunk(**HeaderedChunk(**chunk.model_dump(), header=result.header,
                                          header_source=result.source, header_model=result.model).model_dump(),
                          embedding=vector)
            for chunk, result, vector in zip(job.doc.chunks, job.headers, job.vectors)
        ]
        record = DocumentRecord(
            doc_id=job.key, index_version=self.index_version, source_path=job.doc.source_path,
            kind=job.doc.kind, title=job.doc.title, file_hash=job.doc.file_hash, n_chunks=len(chunks),
            updated_at="",
        )
        return record, chunks
