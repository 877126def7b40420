"""The pipeline's header stage: parsed documents admitted while the chunks in flight stay under a
high-water mark (the one with the most header work first), each streamed to the header source on a
thread of its own, every header handed to the embedding stage as it arrives. Where a pipeline writes
what no gate judges (production kept fresh), a document's finished headers are checked first
(`HeaderHold`), and a document that fails is held."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextual_assets.headers.base import HeaderRequest, HeaderResult, HeaderSource
from contextual_assets.ingest.pipeline.state import DONE, PipelineState, error_text
from contextual_assets.ingest.pipeline.types import DocumentJob, StageEvent, header_work
from contextual_assets.models import ParsedDocument
from eval_assets.header_integrity import PER_HEADER_SIGNALS, document_header_integrity

# Documents parsed and waiting for admission, as a max-heap by header work: (negated work, arrival, ...).
Ready = list[tuple[tuple[int, int], int, ParsedDocument, list[HeaderRequest]]]


# Header sources whose headers are the pipeline's own words, not a model's: never checked (a structural
# header is English over a German chunk by design, and names its own title); a model's chunk that got
# the structural fallback is exempt the same way.
UNCHECKED_SOURCES = frozenset({"structural", "none"})


class HeaderHold:
    """Whether a document's headers may be committed where no gate judges them (production kept fresh,
    `run_plan.run_pipelines`): its model-written headers must pass the gate's per-header signals
    (`eval_assets.header_integrity.document_header_integrity`: an instruction to a reader or model, another
    language than the chunk, another document's title and not its own), each at most the gate's threshold
    as a share of the document's checked headers (an instruction: more than 1 %, so any one in a document of
    under 100 checked headers; another language or title: more than 20 %). Returns None when they pass,
    else the signals with their `reasons`.

    `titles` reads the other documents' titles (document -> title) once, when the first document is
    checked; each checked document's own titles join them, so a later document naming an earlier one of
    the run is seen too."""

    def __init__(self, titles: Callable[[], dict[str, str]]):
        self._read_titles = titles
        self._titles: dict[str, str] | None = None
        self._lock = threading.Lock()

    def __call__(self, job: DocumentJob) -> dict[str, Any] | None:
        checked = [(chunk, result) for chunk, result in zip(job.doc.chunks, job.headers)
                   if result is not None and result.header.strip() and result.source not in UNCHECKED_SOURCES]
        own = {chunk.source_doc: chunk.title for chunk in job.doc.chunks}
        with self._lock:
            if self._titles is None:
                self._titles = dict(self._read_titles())
            # Not the title its own last revision had: a renamed document does not name another one.
            titles = {k: t for k, t in self._titles.items() if k != job.key}
            self._titles.update(own)
        if not checked:
            return None
        signals = document_header_integrity([r.header for _, r in checked], [c.text for c, _ in checked],
                                            [c.source_doc for c, _ in checked], {**titles, **own})
        return signals if signals["reasons"] else None


def held_reason(job: DocumentJob, signals: dict[str, Any]) -> str:
    """One line: the document, what its headers did, and an example."""
    example = f"; e.g. {signals['examples'][0]!r}" if signals.get("examples") else ""
    return (f"headers of {job.doc.source_path} fail the header checks: {'; '.join(signals['reasons'])}, of "
            f"{signals['headers']} checked{example}")


def held_metadata(signals: dict[str, Any]) -> dict[str, Any]:
    """The signals for the held event: each share, the headers checked, the offending examples."""
    metadata: dict[str, Any] = {"headers_checked": signals["headers"], "examples": list(signals["examples"])}
    metadata.update({key: round(signals.get(key, 0.0), 4) for _, key, _, _ in PER_HEADER_SIGNALS})
    return metadata


@dataclass
class HeaderStage:
    state: PipelineState
    header_source: HeaderSource
    header_metadata: Callable[[DocumentJob, Any], dict[str, Any]] | None = None
    header_check: Callable[[DocumentJob], dict[str, Any] | None] | None = None
    # One per admitted document (finished ones pruned): the driver joins them when the run ends.
    threads: list[threading.Thread] = field(default_factory=list, init=False)
    _admitted: int = field(default=0, init=False)  # documents admitted so far: the next one's `seq`

    # ---- admission ---------------------------------------------------------------------------
    def run(self) -> None:
        state = self.state
        ready: Ready = []
        arrival = itertools.count()  # ties keep parse order (and never compare documents)
        parsing = True
        while not state.stop.is_set() and (parsing or ready):
            with state.admission:
                # Admit while fewer chunks than the high-water mark await headers, so the fleet's queue
                # never drains at a document boundary.
                state.admission.wait_for(lambda: state.stop.is_set() or state.documents_in_flight == 0 or (
                    state.documents_in_flight < state.settings.max_documents_in_flight
                    and state.chunks_in_flight < state.settings.high_water()
                ))
            if state.stop.is_set():
                return
            if parsing:
                parsing = self._collect(ready, arrival)
            if not ready or state.stop.is_set():
                continue
            _, _, doc, requests = heapq.heappop(ready)
            self._admit(doc, requests)

    def _collect(self, ready: Ready, arrival: itertools.count) -> bool:
        """Of the documents parsed by now (at most `parse_ahead`), those not yet in `ready` join it,
        waiting for one only when none is ready; False once the parse stage has finished."""
        state = self.state
        block = not ready
        while len(ready) < state.settings.parse_ahead:
            try:
                item = state.parsed.get(timeout=0.5) if block else state.parsed.get_nowait()
            except queue.Empty:
                if block and not state.stop.is_set():
                    continue
                return True
            if item is DONE:
                return False
            doc, requests = item
            work = header_work(requests)
            heapq.heappush(ready, ((-work[0], -work[1]), next(arrival), doc, requests))
            block = False
        return True

    def _admit(self, doc: ParsedDocument, requests: list[HeaderRequest]) -> None:
        state = self.state
        n = len(doc.chunks)
        with state.admission:
            state.documents_in_flight += 1
            state.chunks_in_flight += n
        job = DocumentJob(doc=doc, seq=self._admitted, admitted_at=time.monotonic(), headers=[None] * n,
                          vectors=[None] * n, requests=requests)
        self._admitted += 1
        thread = threading.Thread(target=self._headers, args=(job,), name=f"ingest-headers-{doc.doc_id}",
                                  daemon=True)
        state.jobs[job.seq] = job
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()
        state.first_admitted.set()

    # ---- one document's headers --------------------------------------------------------------
    def _headers(self, job: DocumentJob) -> None:
        state = self.state
        released = 0

        def on_result(index: int, result: HeaderResult) -> None:
            nonlocal released
            job.headers[index] = result
            released += 1
            state.release(chunks=1)
            state.to_embed.put((job.seq, index))

        job.headers_started = time.monotonic()
        stats = None
        try:
            stream_with_stats = getattr(self.header_source, "stream_with_stats", None)
            if stream_with_stats is not None:
                _, stats = stream_with_stats(job.requests, on_result, state.stop)
            else:
                self.header_source.stream(job.requests, on_result, state.stop)
        except Exception as exc:  # noqa: BLE001 - HeaderGenerationError and anything unexpected
            with job.lock:
                job.failed = True
            state.release(chunks=len(job.doc.chunks) - released, document=True)
            state.fail(job.key, "headers", f"headers for {job.doc.source_path}: {error_text(exc)}")
            return
        job.headers_finished = time.monotonic()
        # The document leaves the header stage: an embedding or commit backlog never holds back
        # admission (the fleet would starve behind the CPU).
        state.release(document=True)
        if self._held(job):
            return
        metadata = self.header_metadata(job, stats) if self.header_metadata else {}
        state.events.put(StageEvent("headered", job.key, metadata=metadata))
        with job.lock:
            job.headers_done = True
            ready = job.claim_commit()
        if ready:  # every chunk was already embedded (e.g. all headers came from the cache)
            state.to_commit.put(job)

    def _held(self, job: DocumentJob) -> bool:
        """Whether `header_check` kept the document out of this pipeline's commit (held, or failed when the
        check itself could not run)."""
        if self.header_check is None:
            return False
        try:
            signals = self.header_check(job)
        except Exception as exc:  # noqa: BLE001 - e.g. the store could not be read for the titles
            with job.lock:
                job.failed = True
            self.state.fail(job.key, "headers", f"header check of {job.doc.source_path}: {error_text(exc)}")
            return True
        if signals is None:
            return False
        self.state.hold(job, held_reason(job, signals), held_metadata(signals))
        return True
