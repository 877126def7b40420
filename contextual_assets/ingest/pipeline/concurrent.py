"""Several document pipelines in one run (the current index version and the production version it
keeps fresh), their events merged for the step's thread, which alone may log Dagster events."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from contextual_assets.ingest.pipeline.document_pipeline import DocumentPipeline, StageEvent


class ConcurrentPipelines:
    def __init__(self) -> None:
        self._events: queue.Queue[tuple[str, StageEvent | None]] = queue.Queue()
        self._pipelines: dict[str, tuple[DocumentPipeline, list[str], str | None]] = {}
        self._threads: dict[str, threading.Thread] = {}

    def add(self, role: str, pipeline: DocumentPipeline, keys: list[str], after: str | None = None) -> None:
        """Run `pipeline` over `keys`, at once or once the pipeline of role `after` has finished."""
        self._pipelines[role] = (pipeline, keys, after)

    def _start(self, role: str) -> None:
        pipeline, keys, _ = self._pipelines[role]

        def drain() -> None:
            finished: set[str] = set()
            try:
                for event in pipeline.run(keys):
                    if event.kind in ("committed", "failed", "held"):
                        finished.add(event.key)
                    self._events.put((role, event))
            except Exception as exc:  # noqa: BLE001 - reported per document, never a silent success
                error = f"internal error: {type(exc).__name__}: {exc}"
                for key in keys:
                    if key not in finished:
                        self._events.put((role, StageEvent("failed", key, error=error)))
            finally:
                self._events.put((role, None))

        thread = threading.Thread(target=drain, name=f"ingest-{role}", daemon=True)
        self._threads[role] = thread
        thread.start()

    def events(self) -> Iterator[tuple[str, StageEvent]]:
        """(role, event) as they happen, until every pipeline has finished."""
        for role, (_, _, after) in self._pipelines.items():
            if after is None:
                self._start(role)
        finished: set[str] = set()
        while len(finished) < len(self._pipelines):
            role, event = self._events.get()
            if event is not None:
                yield role, event
                continue
            finished.add(role)
            for waiting, (_, _, after) in self._pipelines.items():
                if after == role and waiting not in self._threads:
                    self._start(waiting)

    def cancel(self) -> None:
        """Stop every pipeline still running (the run was terminated, or it is over) and wait for it."""
        for role, thread in self._threads.items():
            if thread.is_alive():
                self._pipelines[role][0].cancel()
        for thread in self._threads.values():
            thread.join(timeout=60)
