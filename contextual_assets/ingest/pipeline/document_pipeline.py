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

This module runs the stages (`parse_stage`, `header_stage`, `embed_stage`, `commit_stage`, sharing a
`state.PipelineState`) and reports their events; the types are in `types`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from contextual_assets.embedding import Embedder
from contextual_assets.headers.base import HeaderSource
from contextual_assets.ingest.pipeline.commit_stage import CommitStage
from contextual_assets.ingest.pipeline.embed_stage import EmbedStage
from contextual_assets.ingest.pipeline.header_stage import HeaderStage
from contextual_assets.ingest.pipeline.parse_stage import ParseStage
from contextual_assets.ingest.pipeline.state import DONE, PipelineState
from contextual_assets.ingest.pipeline.types import (
    DocumentJob,
    PipelineSettings,
    Stage,
    StageEvent,
    header_work,
    largest_first,
    local_file_size,
    mean_header_words,
)
from contextual_assets.parsing.tokens import TokenCounter
from contextual_assets.store import ChunkStore

# Imported from here by the ingest assets, the CLI and the tests.
__all__ = [
    "DocumentJob",
    "DocumentPipeline",
    "PipelineSettings",
    "Stage",
    "StageEvent",
    "header_work",
    "largest_first",
    "local_file_size",
    "mean_header_words",
]


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
        header_check: Callable[[DocumentJob], dict[str, Any] | None] | None = None,
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
        # Where no gate judges what is written (production kept fresh): a document whose headers fail it
        # is held (see `header_stage.HeaderHold`).
        self.header_check = header_check
        self._state = PipelineState(self.settings)
        self._parse = ParseStage(self._state, store=store, counter=counter, chunk_tokens=chunk_tokens,
                                 max_bytes=max_bytes, max_pdf_pages=max_pdf_pages, context_tokens=context_tokens)
        self._headers = HeaderStage(self._state, header_source=header_source, header_metadata=header_metadata,
                                    header_check=header_check)
        self._embed = EmbedStage(self._state, embedder=embedder)
        self._commit = CommitStage(self._state, store=store, embedder=embedder, index_version=index_version,
                                   fingerprint=fingerprint, recipe=recipe)

    def run(self, keys: list[str]) -> Iterator[StageEvent]:
        """Events as they happen, until every key has committed, failed or been held. Closing the iterator (the
        run was terminated) stops every stage; a commit in progress finishes or rolls back whole."""
        state = self._state
        threads = [
            threading.Thread(target=self._guard(self._parse.run), args=(keys,), name="ingest-parse", daemon=True),
            threading.Thread(target=self._guard(self._headers.run), name="ingest-admit", daemon=True),
            threading.Thread(target=self._guard(self._embed.run), name="ingest-embed", daemon=True),
            threading.Thread(target=self._guard(self._commit.run), name="ingest-commit", daemon=True),
        ]
        for thread in threads:
            thread.start()
        pending = set(keys)
        try:
            while pending:
                event = state.events.get()
                if event.kind == "failed" and event.key == "*":  # a stage thread died: the rest fail
                    for key in sorted(pending):
                        yield StageEvent("failed", key, stage=event.stage, error=event.error)
                    return
                if event.kind in ("committed", "failed", "held"):
                    pending.discard(event.key)
                yield event
        finally:
            state.stop.set()
            state.to_embed.put(DONE)
            state.to_commit.put(DONE)
            with state.admission:
                state.admission.notify_all()
            for thread in [*threads, *self._headers.threads]:
                thread.join(timeout=30)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop every stage from another thread; `run` then reports the documents left as failed."""
        self._state.stop.set()
        self._state.events.put(StageEvent("failed", "*", error=reason))

    def _guard(self, loop: Callable[..., None]) -> Callable[..., None]:
        """A stage thread that dies unexpectedly fails what it held instead of hanging the run."""

        def run(*args) -> None:
            try:
                loop(*args)
            except BaseException as exc:  # noqa: BLE001 - reported, then the run fails the rest
                fatal = f"internal error in {threading.current_thread().name}: {type(exc).__name__}: {exc}"
                self._state.stop.set()
                self._state.events.put(StageEvent("failed", "*", error=fatal))

        return run
