"""What the pipeline's stages share: the queues between them, the stop flag, the header stage's
admission accounting, the documents in flight, and how a document's failure is reported."""

from __future__ import annotations

import queue
import threading
from typing import Any

from contextual_assets.errors import ContextualError
from contextual_assets.ingest.pipeline.types import DocumentJob, PipelineSettings, Stage, StageEvent

DONE = (float("inf"), 0)  # the end of a queue; sorts after every (document, chunk) in the embedding queue


class PipelineState:
    """One run's shared state; each stage object holds it, and only the driver starts or stops them."""

    def __init__(self, settings: PipelineSettings):
        self.settings = settings
        self.events: queue.Queue[StageEvent] = queue.Queue()
        self.parsed: queue.Queue = queue.Queue(maxsize=settings.parse_ahead)
        # Oldest document first: documents complete (and commit) in admission order, not interleaved.
        self.to_embed: queue.PriorityQueue = queue.PriorityQueue()
        self.to_commit: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.admission = threading.Condition()
        self.chunks_in_flight = 0
        self.documents_in_flight = 0
        self.first_admitted = threading.Event()
        self.jobs: dict[int, DocumentJob] = {}

    def fail(self, key: str, stage: Stage, error: str, retryable: bool = True) -> None:
        for seq, job in list(self.jobs.items()):  # drop what the failed document held
            if job.key == key:
                self.jobs.pop(seq, None)
        self.events.put(StageEvent("failed", key, stage=stage, error=error, retryable=retryable))

    def hold(self, job: DocumentJob, reason: str, metadata: dict[str, Any]) -> None:
        """Keep a document whose headers are done out of this pipeline's commit (the embedding stage
        drops what it still holds of it); reported as held, not failed."""
        with job.lock:
            job.failed = True
        self.jobs.pop(job.seq, None)
        self.events.put(StageEvent("held", job.key, metadata=metadata, stage="headers", error=reason,
                                   retryable=False))

    def abandon(self, job: DocumentJob, stage: Stage, error: str) -> None:
        """Fail an admitted document once, however many of its chunks fail."""
        with job.lock:
            if job.failed:
                return
            job.failed = True
        self.fail(job.key, stage, error)

    def release(self, chunks: int = 0, document: bool = False) -> None:
        """Header work done (or given up): the admission loop may let the next document in."""
        with self.admission:
            self.chunks_in_flight -= chunks
            if document:
                self.documents_in_flight -= 1
            self.admission.notify_all()


def take_batch(source: queue.Queue, first: Any, limit: int) -> list:
    """`first` and whatever else is queued already, up to `limit` items; the end of the queue, met
    here, is put back for the next blocking get (which then stops the loop)."""
    batch = [first]
    while len(batch) < limit:
        try:
            more = source.get_nowait()
        except queue.Empty:
            break
        if more is DONE:
            source.put(DONE)
            break
        batch.append(more)
    return batch


def error_text(exc: Exception) -> str:
    """An exception for a document's failure: our own errors read as they are, others with their type."""
    return str(exc) if isinstance(exc, ContextualError) else f"{type(exc).__name__}: {exc}"
