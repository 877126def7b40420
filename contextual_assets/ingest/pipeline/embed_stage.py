"""The pipeline's embedding stage: micro-batches of whatever headers are ready, across documents,
oldest document first; a document whose last chunk is embedded goes on to commit."""

from __future__ import annotations

import time
from dataclasses import dataclass

from contextual_assets.embedding import Embedder, embedding_text
from contextual_assets.ingest.pipeline.state import DONE, PipelineState, take_batch
from contextual_assets.ingest.pipeline.types import DocumentJob


@dataclass
class EmbedStage:
    state: PipelineState
    embedder: Embedder

    def run(self) -> None:
        state = self.state
        # Load the model once the first requests are out (imports hold the GIL), while the fleet
        # generates the first headers.
        while not state.first_admitted.wait(0.5):
            if state.stop.is_set():
                return
        try:
            self.embedder.warm()
        except Exception:  # noqa: BLE001 - the first batch reports it, per document
            pass
        while not state.stop.is_set():
            item = state.to_embed.get()
            if item is DONE:
                return
            items = take_batch(state.to_embed, item, state.settings.embed_batch_max)
            batch = [(state.jobs[seq], i) for seq, i in items if seq in state.jobs]
            batch = [(job, i) for job, i in batch if not job.failed]
            if batch:
                self._embed(batch)

    def _embed(self, batch: list[tuple[DocumentJob, int]]) -> None:
        """One forward pass over (document, chunk) pairs; the vectors go back to their documents."""
        started = time.monotonic()
        try:
            vectors = self.embedder.embed([
                embedding_text(job.headers[i].header, job.doc.chunks[i].text) for job, i in batch
            ])
        except Exception as exc:  # noqa: BLE001 - the embedder is down: these documents fail
            for job in {id(j): j for j, _ in batch}.values():
                self.state.abandon(job, "embed", f"embedding {job.doc.source_path}: {type(exc).__name__}: {exc}")
            return
        share = (time.monotonic() - started) / len(batch)
        for (job, i), vector in zip(batch, vectors):
            with job.lock:
                job.vectors[i] = vector
                job.embedded += 1
                job.embed_s += share
                ready = job.claim_commit()
            if ready:
                self.state.to_commit.put(job)
