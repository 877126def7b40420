"""What the document pipeline works with: the events it reports, its settings, a document's
bookkeeping between stages, and the size estimates that decide which document goes first."""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from contextual_assets.headers.base import HeaderRequest, HeaderResult
from contextual_assets.models import ParsedDocument
from contextual_assets.parsing.objects import is_object_url

Stage = Literal["parse", "headers", "embed", "commit"]


@dataclass
class StageEvent:
    """What the pipeline reports: a stage finished for a document, a document failed, a document was held
    (its headers failed the checks of a pipeline that writes where no gate judges: not committed, not a
    failure; `error` says why, `metadata` holds the signals), or a warning."""

    kind: Literal["parsed", "headered", "committed", "failed", "held", "warning"]
    key: str
    metadata: dict[str, Any] = field(default_factory=dict)
    stage: Stage | None = None
    error: str | None = None
    retryable: bool = True


@dataclass
class PipelineSettings:
    max_documents_in_flight: int = 256  # documents waiting for headers
    chunks_in_flight: int = 128  # header requests outstanding before the next document is admitted
    # With a fleet, the high-water mark follows the concurrency its replicas have been found to take
    # (it grows as the pool finds more): `fleet_queue_factor` x `fleet_capacity()`.
    fleet_capacity: Callable[[], int] | None = None
    fleet_queue_factor: float = 2.0
    parse_ahead: int = 4  # parsed documents waiting for admission
    embed_batch_max: int = 64  # chunks per forward pass, at most
    commit_batch_max: int = 32  # documents per store transaction, at most (those ready at the time)

    def high_water(self) -> int:
        """Header requests outstanding before the next document is admitted."""
        if self.fleet_capacity is None:
            return self.chunks_in_flight
        return max(16, int(self.fleet_queue_factor * self.fleet_capacity()))


@dataclass
class DocumentJob:
    """Header-stage document bookkeeping, shared by the header, embedding and commit threads."""

    doc: ParsedDocument
    seq: int  # admission order
    admitted_at: float
    headers: list[HeaderResult | None]
    vectors: list[list[float] | None]
    requests: list[HeaderRequest] = field(default_factory=list)
    embedded: int = 0
    headers_done: bool = False
    failed: bool = False
    queued_for_commit: bool = False
    embed_s: float = 0.0
    headers_started: float = 0.0
    headers_finished: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def key(self) -> str:
        return self.doc.doc_id

    def complete(self) -> bool:
        return self.headers_done and self.embedded == len(self.doc.chunks) and not self.failed

    def claim_commit(self) -> bool:
        """Whether the caller queues the document for commit: it is complete and nobody has yet. Called
        with `lock` held, so that of the header and embedding threads exactly one queues it."""
        ready = self.complete() and not self.queued_for_commit
        self.queued_for_commit |= ready
        return ready


def header_work(requests: list[HeaderRequest]) -> tuple[int, int]:
    """A document's estimated header cost, for longest-first admission: answers to decode (one per
    request: decoding dominates an LLM's time per request), then prompt tokens (chunk + context,
    about 4 characters a token)."""
    prompt = sum(r.chunk.token_count + sum(len(t) for t in (*r.before, *r.after)) // 4 for r in requests)
    return len(requests), prompt


def largest_first(keys: list[str], size_of: Callable[[str], int]) -> list[str]:
    """`keys` by estimated size, largest first (ties keep their order): the parse order that lets the
    longest documents start first."""
    return sorted(keys, key=lambda k: -size_of(k))


def local_file_size(path: str | None) -> int:
    """The size of a local file, 0 when unknown (an object URL, or gone: the parse reports that)."""
    if not path or is_object_url(path):
        return 0
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def mean_header_words(job: DocumentJob) -> float:
    lengths = [len(r.header.split()) for r in job.headers if r is not None and r.header]
    return round(statistics.mean(lengths), 1) if lengths else 0.0
