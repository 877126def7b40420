"""Cross-document pipelining: many document partitions in one run, the header fleet never waiting.

Four stages, each on its own thread, joined by queues:

    parse (largest file first, a few documents ahead)
      -> headers (documents admitted while the chunks in flight stay under a high-water mark, so the
         shared fleet pool always has work queued; of the documents parsed, the one with the most
         header work goes first: longest-processing-time-first, so that no long document starts last
         and runs alone at the end; requests go out roughly in admission order)
      -> embedding (micro-batches of whatever headers are ready, across documents, as they arrive)
      -> commit (one atomic replace per document, when its last chunk is embedded)

so parsing of the next documents, embedding and commits of finished ones happen in the shadow of
LLM work, and only the last micro-batch and commit remain after the fleet's last answer. A document
that fails at any stage fails alone; nothing of it is committed. The caller's thread only consumes
`StageEvent`s (Dagster events must be logged from the step's thread).
"""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contextual_assets.embedding import Embedder, embedding_text
from contextual_assets.errors import ContextualError, DocumentError, StaleDocumentError
from contextual_assets.headers.base import HeaderRequest, HeaderResult, HeaderSource
from contextual_assets.headers.context import header_requests
from contextual_assets.ingest.parse import parse_document, parse_metadata
from contextual_assets.models import (
    DocumentRecord,
    EmbeddedChunk,
    HeaderedChunk,
    ParsedDocument,
)
from contextual_assets.parsing.objects import (
    SourceUnavailableError,
    is_object_url,
    object_info,
    object_revision,
)
from contextual_assets.parsing.tokens import TokenCounter
from contextual_assets.store import ChunkStore

Stage = Literal["parse", "headers", "embed", "commit"]


@dataclass
class StageEvent:
    """What the pipeline reports: a stage finished for a document, a document failed, or a warning."""

    kind: Literal["parsed", "headered", "committed", "failed", "warning"]
    key: str
    metadata: dict[str, Any] = field(default_factory=dict)
    stage: Stage | None = None
    error: str | None = None
    retryable: bool = True


@dataclass
class PipelineSettings:
    max_documents_in_flight: int = 64  # documents waiting for headers
    chunks_in_flight: int = 128  # header requests outstanding before the next document is admitted
    parse_ahead: int = 4  # parsed documents waiting for admission
    embed_batch_max: int = 64  # chunks per forward pass, at most
    commit_batch_max: int = 32  # documents per store transaction, at most (those ready at the time)


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


_DONE = (float("inf"), 0)  # sorts after every (document, chunk) in the embedding queue


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


class DocumentPipeline:
    def __init__(
        self,
        *,
        store: ChunkStore,
        counter: TokenCounter,
        chunk_tokens: int,
        max_bytes: int,
        max_pdf_pages: int,
        header_source: HeaderSource,
        context_tokens: int,
        embedder: Embedder,
        index_version: str,
        fingerprint: dict[str, str],
        recipe: dict[str, Any] | None = None,
        settings: PipelineSettings | None = None,
        header_metadata: Callable[[DocumentJob, Any], dict[str, Any]] | None = None,
    ):
        self.store = store
        self.counter = counter
        self.chunk_tokens = chunk_tokens
        self.max_bytes = max_bytes
        self.max_pdf_pages = max_pdf_pages
        self.header_source = header_source
        self.context_tokens = context_tokens
        self.embedder = embedder
        self.index_version = index_version
        self.fingerprint = fingerprint
        self.recipe = recipe
        self.settings = settings or PipelineSettings()
        self.header_metadata = header_metadata
        self._events: queue.Queue[StageEvent] = queue.Queue()
        self._parsed: queue.Queue = queue.Queue(maxsize=self.settings.parse_ahead)
        # Oldest document first: documents complete (and commit) in admission order, not interleaved.
        self._to_embed: queue.PriorityQueue = queue.PriorityQueue()
        self._to_commit: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._admission = threading.Condition()
        self._chunks_in_flight = 0
        self._documents_in_flight = 0
        self._admitted = 0
        self._first_admitted = threading.Event()
        self._jobs: dict[int, DocumentJob] = {}
        self._header_threads: list[threading.Thread] = []

    # ---- driver ------------------------------------------------------------------------------
    def run(self, keys: list[str]) -> Iterator[StageEvent]:
        """Events as they happen, until every key has committed or failed. Closing the iterator (the
        run was terminated) stops every stage; a commit in progress finishes or rolls back whole."""
        threads = [
            threading.Thread(target=self._guard(self._parse_loop), args=(keys,), name="ingest-parse", daemon=True),
            threading.Thread(target=self._guard(self._admit_loop), name="ingest-admit", daemon=True),
            threading.Thread(target=self._guard(self._embed_loop), name="ingest-embed", daemon=True),
            threading.Thread(target=self._guard(self._commit_loop), name="ingest-commit", daemon=True),
        ]
        for thread in threads:
            thread.start()
        pending = set(keys)
        try:
            while pending:
                event = self._events.get()
                if event.kind == "failed" and event.key == "*":  # a stage thread died: the rest fail
                    for key in sorted(pending):
                        yield StageEvent("failed", key, stage=event.stage, error=event.error)
                    return
                if event.kind in ("committed", "failed"):
                    pending.discard(event.key)
                yield event
        finally:
            self._stop.set()
            self._to_embed.put(_DONE)
            self._to_commit.put(_DONE)
            with self._admission:
                self._admission.notify_all()
            for thread in [*threads, *self._header_threads]:
                thread.join(timeout=30)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop every stage from another thread; `run` then reports the documents left as failed."""
        self._stop.set()
        self._events.put(StageEvent("failed", "*", error=reason))

    def _guard(self, loop: Callable[..., None]) -> Callable[..., None]:
        """A stage thread that dies unexpectedly fails what it held instead of hanging the run."""

        def run(*args) -> None:
            try:
                loop(*args)
            except BaseException as exc:  # noqa: BLE001 - reported, then the run fails the rest
                fatal = f"internal error in {threading.current_thread().name}: {type(exc).__name__}: {exc}"
                self._stop.set()
                self._events.put(StageEvent("failed", "*", error=fatal))

        return run

    def _fail(self, key: str, stage: Stage, error: str, retryable: bool = True) -> None:
        for seq, job in list(self._jobs.items()):  # drop what the failed document held
            if job.key == key:
                self._jobs.pop(seq, None)
        self._events.put(StageEvent("failed", key, stage=stage, error=error, retryable=retryable))

    # ---- parse -------------------------------------------------------------------------------
    def _parse_loop(self, keys: list[str]) -> None:
        # One read of the registered sources for the run (a store open per document adds up for many
        # small ones); a source registered since (or a single document) is read on its own.
        sources = {s.doc_id: s for s in self.store.list_sources()} if len(keys) > 1 else {}
        for key in largest_first(keys, lambda k: local_file_size(sources[k].path if k in sources else None)):
            if self._stop.is_set():
                break
            started = time.monotonic()
            source = sources.get(key) or self.store.get_source(key)
            if source is None:
                self._fail(key, "parse", f"document '{key}' has no registered file; add it to the inbox or run "
                                         "`ctx ingest PATH`", retryable=False)
                continue
            try:
                doc = self._parse(key, source.path)
            except SourceUnavailableError as exc:  # the object store, not the document: worth a retry
                self._fail(key, "parse", f"cannot read {exc}")
                continue
            except DocumentError as exc:
                self._fail(key, "parse", f"cannot ingest {exc.path}: {exc.reason}", retryable=False)
                continue
            except Exception as exc:  # noqa: BLE001 - a parser bug fails this document, not the run
                self._fail(key, "parse", f"cannot ingest {source.path}: {type(exc).__name__}: {exc}", retryable=False)
                continue
            if source.file_hash and doc.file_hash != source.file_hash:
                # Refused now, not at commit after its headers were paid for: the run for the new
                # content (the sensor's next tick, or `ctx ingest` again) ingests it.
                self._fail(key, "parse", f"{source.path}: the file changed since it was registered; the run for "
                                         "its new content ingests it", retryable=False)
                continue
            for warning in doc.warnings:
                self._events.put(StageEvent("warning", key, error=f"{source.path}: {warning}"))
            self._events.put(StageEvent("parsed", key, metadata=parse_metadata(doc, self.chunk_tokens,
                                                                               self.counter.name,
                                                                               time.monotonic() - started)))
            requests = header_requests(doc, self.counter, self.context_tokens)
            while not self._stop.is_set():
                try:
                    self._parsed.put((doc, requests), timeout=0.5)
                    break
                except queue.Full:
                    continue
        while not self._stop.is_set():  # a stopped run's admission loop no longer drains the queue
            try:
                self._parsed.put(_DONE, timeout=0.5)
                return
            except queue.Full:
                continue

    def _parse(self, key: str, location: str) -> ParsedDocument:
        if not is_object_url(location):
            return parse_document(key, Path(location), self.counter, chunk_tokens=self.chunk_tokens,
                                  max_bytes=self.max_bytes, max_pdf_pages=self.max_pdf_pages)
        from upath import UPath

        # An object's revision is its ETag (what the inbox sensor registered), not a hash of the bytes:
        # read between two looks at it, so the revision recorded is the one whose bytes were parsed.
        before = object_revision(object_info(location))
        doc = parse_document(key, UPath(location), self.counter, chunk_tokens=self.chunk_tokens,
                             max_bytes=self.max_bytes, max_pdf_pages=self.max_pdf_pages)
        if object_revision(object_info(location)) != before:
            raise DocumentError(location, "the object changed while it was read; the run for its new revision "
                                          "ingests it")
        return doc.model_copy(update={"file_hash": before})

    # ---- headers -----------------------------------------------------------------------------
    def _admit_loop(self) -> None:
        ready: list[tuple[tuple[int, int], int, ParsedDocument, list[HeaderRequest]]] = []  # max-heap by work
        arrival = itertools.count()  # ties keep parse order (and never compare documents)
        parsing = True
        while not self._stop.is_set() and (parsing or ready):
            with self._admission:
                # Admit while fewer chunks than the high-water mark await headers, so the fleet's queue
                # never drains at a document boundary.
                self._admission.wait_for(lambda: self._stop.is_set() or self._documents_in_flight == 0 or (
                    self._documents_in_flight < self.settings.max_documents_in_flight
                    and self._chunks_in_flight < self.settings.chunks_in_flight
                ))
            if self._stop.is_set():
                return
            # Of the documents parsed by now (at most `parse_ahead`), the one with the most header work.
            block = not ready
            while parsing and len(ready) < self.settings.parse_ahead:
                try:
                    item = self._parsed.get(timeout=0.5) if block else self._parsed.get_nowait()
                except queue.Empty:
                    if block and not self._stop.is_set():
                        continue
                    break
                if item is _DONE:
                    parsing = False
                    break
                doc, requests = item
                work = header_work(requests)
                heapq.heappush(ready, ((-work[0], -work[1]), next(arrival), doc, requests))
                block = False
            if not ready or self._stop.is_set():
                continue
            _, _, doc, requests = heapq.heappop(ready)
            n = len(doc.chunks)
            with self._admission:
                self._documents_in_flight += 1
                self._chunks_in_flight += n
            job = DocumentJob(doc=doc, seq=self._admitted, admitted_at=time.monotonic(), headers=[None] * n,
                              vectors=[None] * n, requests=requests)
            self._admitted += 1
            thread = threading.Thread(target=self._headers, args=(job,), name=f"ingest-headers-{doc.doc_id}",
                                      daemon=True)
            self._jobs[job.seq] = job
            self._header_threads = [t for t in self._header_threads if t.is_alive()] + [thread]
            thread.start()
            self._first_admitted.set()

    def _release(self, chunks: int = 0, document: bool = False) -> None:
        with self._admission:
            self._chunks_in_flight -= chunks
            if document:
                self._documents_in_flight -= 1
            self._admission.notify_all()

    def _headers(self, job: DocumentJob) -> None:
        requests = job.requests
        released = 0

        def on_result(index: int, result: HeaderResult) -> None:
            nonlocal released
            job.headers[index] = result
            released += 1
            self._release(chunks=1)
            self._to_embed.put((job.seq, index))

        job.headers_started = time.monotonic()
        stats = None
        try:
            stream_with_stats = getattr(self.header_source, "stream_with_stats", None)
            if stream_with_stats is not None:
                _, stats = stream_with_stats(requests, on_result, self._stop)
            else:
                self.header_source.stream(requests, on_result, self._stop)
        except Exception as exc:  # noqa: BLE001 - HeaderGenerationError and anything unexpected
            with job.lock:
                job.failed = True
            self._release(chunks=len(job.doc.chunks) - released, document=True)
            message = str(exc) if isinstance(exc, ContextualError) else f"{type(exc).__name__}: {exc}"
            self._fail(job.key, "headers", f"headers for {job.doc.source_path}: {message}")
            return
        job.headers_finished = time.monotonic()
        # The document leaves the header stage: an embedding or commit backlog never holds back
        # admission (the fleet would starve behind the CPU).
        self._release(document=True)
        metadata = self.header_metadata(job, stats) if self.header_metadata else {}
        self._events.put(StageEvent("headered", job.key, metadata=metadata))
        with job.lock:
            job.headers_done = True
            ready = job.complete() and not job.queued_for_commit
            job.queued_for_commit |= ready
        if ready:  # every chunk was already embedded (e.g. all headers came from the cache)
            self._to_commit.put(job)

    # ---- embedding ---------------------------------------------------------------------------
    def _embed_loop(self) -> None:
        # Load the model once the first requests are out (imports hold the GIL), while the fleet
        # generates the first headers.
        while not self._first_admitted.wait(0.5):
            if self._stop.is_set():
                return
        try:
            self.embedder.warm()
        except Exception:  # noqa: BLE001 - the first batch reports it, per document
            pass
        while not self._stop.is_set():
            item = self._to_embed.get()
            if item == _DONE:
                return
            batch = [item]
            while len(batch) < self.settings.embed_batch_max:
                try:
                    more = self._to_embed.get_nowait()
                except queue.Empty:
                    break
                if more == _DONE:
                    self._to_embed.put(_DONE)
                    break
                batch.append(more)
            batch = [(self._jobs[seq], i) for seq, i in batch if seq in self._jobs]
            batch = [(job, i) for job, i in batch if not job.failed]
            if not batch:
                continue
            started = time.monotonic()
            try:
                vectors = self.embedder.embed([
                    embedding_text(job.headers[i].header, job.doc.chunks[i].text) for job, i in batch
                ])
            except Exception as exc:  # noqa: BLE001 - the embedder is down: these documents fail
                for job in {id(j): j for j, _ in batch}.values():
                    self._abandon(job, "embed", f"embedding {job.doc.source_path}: {type(exc).__name__}: {exc}")
                continue
            share = (time.monotonic() - started) / len(batch)
            for (job, i), vector in zip(batch, vectors):
                with job.lock:
                    job.vectors[i] = vector
                    job.embedded += 1
                    job.embed_s += share
                    ready = job.complete() and not job.queued_for_commit
                    job.queued_for_commit |= ready
                if ready:
                    self._to_commit.put(job)

    def _abandon(self, job: DocumentJob, stage: Stage, error: str) -> None:
        with job.lock:
            if job.failed:
                return
            job.failed = True
        self._fail(job.key, stage, error)

    # ---- commit ------------------------------------------------------------------------------
    def _commit_loop(self) -> None:
        registered = False
        while True:
            job = self._to_commit.get()
            if job is _DONE or self._stop.is_set():
                return
            # Documents that finished while the last commit ran go in one transaction (one open of a
            # DuckDB file, one commit): small documents would otherwise queue behind per-document opens.
            batch = [job]
            while len(batch) < self.settings.commit_batch_max:
                try:
                    more = self._to_commit.get_nowait()
                except queue.Empty:
                    break
                if more is _DONE:
                    self._to_commit.put(_DONE)
                    break
                batch.append(more)
            started = time.monotonic()
            try:
                if not registered:
                    self.store.register_index_version(self.index_version, self.fingerprint, self.recipe)
                    registered = True
            except Exception as exc:  # noqa: BLE001 - store down or locked past its retries
                message = str(exc) if isinstance(exc, ContextualError) else f"{type(exc).__name__}: {exc}"
                for job in batch:
                    self._fail(job.key, "commit", f"commit of {job.key}: {message}")
                continue
            rows = [self._rows(job) for job in batch]
            if len(batch) > 1:
                try:
                    self.store.replace_documents(rows, require_current_source=True)
                except Exception:  # noqa: BLE001 - one of them failed: commit each alone, to fail only it
                    pass
                else:
                    share = (time.monotonic() - started) / len(batch)
                    for job in batch:
                        self._committed(job, share, len(batch))
                    continue
            for job, (record, chunks) in zip(batch, rows):
                started = time.monotonic()
                try:
                    self.store.replace_document(record, chunks, require_current_source=True)
                except StaleDocumentError as exc:
                    self._fail(job.key, "commit", str(exc), retryable=False)
                    continue
                except Exception as exc:  # noqa: BLE001 - store down or locked past its retries
                    message = str(exc) if isinstance(exc, ContextualError) else f"{type(exc).__name__}: {exc}"
                    self._fail(job.key, "commit", f"commit of {job.key}: {message}")
                    continue
                self._committed(job, time.monotonic() - started, 1)

    def _committed(self, job: DocumentJob, commit_s: float, together: int) -> None:
        self._jobs.pop(job.seq, None)  # its vectors are in the store now
        self._events.put(StageEvent("committed", job.key, metadata={
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

    def _rows(self, job: DocumentJob) -> tuple[DocumentRecord, list[EmbeddedChunk]]:
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


def mean_header_words(job: DocumentJob) -> float:
    lengths = [len(r.header.split()) for r in job.headers if r is not None and r.header]
    return round(statistics.mean(lengths), 1) if lengths else 0.0
