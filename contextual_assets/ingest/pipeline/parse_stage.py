"""The pipeline's parse stage: a run's documents read and chunked, largest file first, a few
documents ahead of the header stage, each with its header requests."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from pathlib import Path

from contextual_assets.errors import DocumentError
from contextual_assets.headers.context import header_requests
from contextual_assets.ingest.pipeline.parse import parse_document, parse_metadata
from contextual_assets.ingest.pipeline.state import DONE, PipelineState
from contextual_assets.ingest.pipeline.types import StageEvent, largest_first, local_file_size
from contextual_assets.models import ParsedDocument
from contextual_assets.parsing.objects import (
    SourceUnavailableError,
    is_object_url,
    object_info,
    object_revision,
)
from contextual_assets.parsing.tokens import TokenCounter
from contextual_assets.store import ChunkStore


@dataclass
class ParseStage:
    state: PipelineState
    store: ChunkStore
    counter: TokenCounter
    chunk_tokens: int
    max_bytes: int
    max_pdf_pages: int
    context_tokens: int

    def run(self, keys: list[str]) -> None:
        state = self.state
        # One read of the registered sources for the run (a store open per document adds up for many
        # small ones); a source registered since (or a single document) is read on its own.
        sources = {s.doc_id: s for s in self.store.corpus.list_sources()} if len(keys) > 1 else {}
        for key in largest_first(keys, lambda k: local_file_size(sources[k].path if k in sources else None)):
            if state.stop.is_set():
                break
            started = time.monotonic()
            source = sources.get(key) or self.store.corpus.get_source(key)
            if source is None:
                state.fail(key, "parse", f"document '{key}' has no registered file; add it to the inbox or run "
                                         "`ctx ingest PATH`", retryable=False)
                continue
            try:
                doc = self.parse(key, source.path)
            except SourceUnavailableError as exc:  # the object store, not the document: worth a retry
                state.fail(key, "parse", f"cannot read {exc}")
                continue
            except DocumentError as exc:
                state.fail(key, "parse", f"cannot ingest {exc.path}: {exc.reason}", retryable=False)
                continue
            except Exception as exc:  # noqa: BLE001 - a parser bug fails this document, not the run
                state.fail(key, "parse", f"cannot ingest {source.path}: {type(exc).__name__}: {exc}", retryable=False)
                continue
            if source.file_hash and doc.file_hash != source.file_hash:
                # Refused now, not at commit after its headers were paid for: the run for the new
                # content (the sensor's next tick, or `ctx ingest` again) ingests it.
                state.fail(key, "parse", f"{source.path}: the file changed since it was registered; the run for "
                                         "its new content ingests it", retryable=False)
                continue
            self._hand_over(key, doc, source.path, started)
        self._put(DONE)

    def _hand_over(self, key: str, doc: ParsedDocument, path: str, started: float) -> None:
        """Report the parsed document, then queue it (with its header requests) for admission."""
        for warning in doc.warnings:
            self.state.events.put(StageEvent("warning", key, error=f"{path}: {warning}"))
        self.state.events.put(StageEvent("parsed", key, metadata=parse_metadata(
            doc, self.chunk_tokens, self.counter.name, time.monotonic() - started)))
        self._put((doc, header_requests(doc, self.counter, self.context_tokens)))

    def _put(self, item: object) -> None:
        # Never blocks for good: a stopped run's admission loop no longer drains the queue.
        while not self.state.stop.is_set():
            try:
                self.state.parsed.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def parse(self, key: str, location: str) -> ParsedDocument:
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
