"""Driving ingest through the Dagster definitions and instance (used by `ctx` and benchmarks)."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path

import dagster as dg
from pydantic import BaseModel

from contextual_assets.defs.ingest.partitions import documents_partitions, range_run_tags
from contextual_assets.ingest.inbox.file_selection import collect_sources  # noqa: F401 (ingest callers pick files here)
from contextual_assets.ingest.inbox.tick_plan import file_sha256
from contextual_assets.ingest.inbox.partition_ranges import partition_ranges
from contextual_assets.ingest.pipeline.document_pipeline import local_file_size
from contextual_assets.lifecycle.commit_reconcile import recover_dead_runs  # noqa: F401 (ctx commands call it here)
from contextual_assets.lifecycle.run_liveness import this_process_tags
from contextual_assets.models import SourceRecord
from contextual_assets.names import CHUNK_EMBEDDINGS, INGEST_JOB
from contextual_assets.store import ChunkStore

REPO_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"  # the checkout's instance settings


class PartitionOutcome(BaseModel):
    key: str
    path: str
    success: bool
    run_id: str | None = None
    chunks: int = 0
    error: str | None = None


def ensure_dagster_home(ctx_home: str) -> Path:
    """DAGSTER_HOME, defaulting to <CTX_HOME>/dagster, seeded with the shipped dagster.yaml."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path(ctx_home, "dagster")).absolute()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    if not (home / "dagster.yaml").exists() and REPO_DAGSTER_YAML.exists():
        shutil.copyfile(REPO_DAGSTER_YAML, home / "dagster.yaml")
    return home


def register_sources(store: ChunkStore, instance: dg.DagsterInstance, sources: list[tuple[str, Path]]) -> None:
    for key, path in sources:
        # The resolved path: the file is read without following links, so a file swapped for a
        # symlink after registration is refused instead of read wherever it points.
        store.corpus.register_source(SourceRecord(doc_id=key, path=str(path.resolve()), file_hash=file_sha256(path)))
    instance.add_dynamic_partitions(documents_partitions.name, [key for key, _ in sources])


def ingest_partitions(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    sources: list[tuple[str, Path]],
    on_done: Callable[[PartitionOutcome], None] | None = None,
    log_level: str = "INFO",
) -> list[PartitionOutcome]:
    """Runs in this process, recorded in the instance: the documents grouped into partition ranges
    as a backfill would (contiguous in the partitions' order, at most the asset's backfill policy's
    partitions per run, cut at even file size), so that their header requests are pipelined across documents.

    `on_done` hears of each document once: a committed one as its commit is recorded, while its run
    still works on the others (from a watcher thread); a failed one when its run has ended."""
    job = defs.resolve_job_def(INGEST_JOB)
    policy = defs.resolve_assets_def(dg.AssetKey(CHUNK_EMBEDDINGS)).backfill_policy
    per_run = (policy.max_partitions_per_run if policy else None) or len(sources) or 1
    paths = dict(sources)
    outcomes: list[PartitionOutcome] = []
    for keys in partition_ranges(instance.get_dynamic_partitions(documents_partitions.name), list(paths), per_run,
                                 cost=lambda key: local_file_size(str(paths[key]))):
        # The process's identity: a later command fails the run if this process dies (run_liveness.py).
        tags = {"ctx/trigger": "cli", **this_process_tags()}
        if len(keys) == 1:
            range_kwargs: dict = {"partition_key": keys[0]}
        else:
            range_kwargs = {}
            tags.update(range_run_tags(keys))
        run_id = str(uuid.uuid4())  # known before the run starts, so the watcher can follow it

        def committed_early(key: str, chunks: int, run_id: str = run_id) -> None:
            if on_done:
                on_done(PartitionOutcome(key=key, path=str(paths[key]), success=True, run_id=run_id, chunks=chunks))

        with CommitWatcher(instance, run_id, keys, committed_early) if on_done else nullcontext() as watcher:
            result = job.execute_in_process(
                instance=instance, raise_on_error=False, tags=tags, run_id=run_id,
                run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}, **range_kwargs,
            )
        reported = watcher.reported if watcher is not None else set()
        committed = committed_documents(result)
        failed = failed_documents(result)
        for key in keys:
            outcome = PartitionOutcome(key=key, path=str(paths[key]), success=key in committed, run_id=result.run_id,
                                       chunks=committed.get(key, 0))
            if not outcome.success:
                outcome.error = failed.get(key) or failure_message(result)
            outcomes.append(outcome)
            if on_done and key not in reported:
                on_done(outcome)
    return outcomes




def _chunks(metadata: Mapping[str, dg.MetadataValue]) -> int:
    value = metadata.get("chunks")
    return int(value.value) if value is not None else 0


def committed_documents(result: dg.ExecuteInProcessResult) -> dict[str, int]:
    """Partition -> chunks of each document the run committed."""
    committed: dict[str, int] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        if materialization.asset_key == dg.AssetKey(CHUNK_EMBEDDINGS) and materialization.partition:
            committed[materialization.partition] = _chunks(materialization.metadata)
    return committed


class CommitWatcher:
    """Follows a run's commits in the instance's event log while the run executes in this thread:
    a thread polls for its `chunk_embeddings` materializations (public `fetch_materializations`)
    and reports each partition once, so progress moves per document, not per run. Polling, not an
    in-process hook, so it sees exactly what the UI sees."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, keys: list[str],
                 report: Callable[[str, int], None], poll_s: float = 0.2):
        self.instance, self.run_id, self.keys, self.report, self.poll_s = instance, run_id, keys, report, poll_s
        self.reported: set[str] = set()
        self._after: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ctx-commits-{run_id[:8]}", daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> CommitWatcher:
        # Only events stored from now on: the run has not started, so its commits all come after this.
        latest = self.instance.fetch_materializations(dg.AssetKey(CHUNK_EMBEDDINGS), limit=1).records
        self._after = latest[0].storage_id if latest else None
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        # A poll stuck on a hung database must not hold the command after its run has ended: the
        # thread is a daemon, and the final poll below reports what it would have.
        self._thread.join(timeout=30)
        if exc_info[0] is None:
            self.poll()  # what the run committed after the thread's last look
        if self._error is not None and exc_info[0] is None:
            raise self._error

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - e.g. `report` failed: re-raised once the run has ended
                self._error = exc
                return

    def poll(self) -> None:
        while True:
            page = self.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(CHUNK_EMBEDDINGS), asset_partitions=self.keys,
                                      after_storage_id=self._after),
                limit=100, ascending=True)
            for record in page.records:
                self._after = record.storage_id
                materialization = record.asset_materialization
                key = record.partition_key
                if record.run_id != self.run_id or materialization is None or key is None or key in self.reported:
                    continue
                self.reported.add(key)
                self.report(key, _chunks(materialization.metadata))
            if not page.has_more:
                return


def _failures(result: dg.ExecuteInProcessResult) -> list[dg.DagsterEvent]:
    return [event for event in result.get_step_failure_events() if event.step_failure_data is not None]


def failed_documents(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """Per-document errors that the ingest step put in its failure's metadata."""
    for event in _failures(result):
        data = event.step_failure_data
        if data.user_failure_data and "failed_documents" in data.user_failure_data.metadata:
            value = data.user_failure_data.metadata["failed_documents"].value
            return {key: str(item.get("error")) for key, item in value.items()}
    return {}


def _raised(error):
    """What the step itself raised: Dagster wraps it ("Error occurred while executing op ...", or
    "Exceeded max_retries" once a retry policy gives up) with the real error as the cause."""
    while error.cause is not None and error.cls_name.startswith(("Dagster", "RetryRequested")):
        error = error.cause
    return error


def failure_cause(result: dg.ExecuteInProcessResult) -> str | None:
    """The class name of what the first failed step raised (e.g. `StoreUnavailable`; `Failure` for a
    step's own user-facing failure); None when no step failed."""
    for event in _failures(result):
        error = event.step_failure_data.error
        return _raised(error).cls_name if error is not None else None
    return None


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    for event in _failures(result):
        data = event.step_failure_data
        if data.error:
            # The user-facing reason is the innermost cause, e.g. a StoreError naming the database.
            message = _raised(data.error).message.strip()
            if message.startswith("contextual_assets.errors."):
                message = message.removeprefix("contextual_assets.errors.")
            # dg.Failure's description is the user-facing message.
            if data.user_failure_data and data.user_failure_data.description:
                message = data.user_failure_data.description
            return message.splitlines()[0] if message else "step failed"
    return "run failed"
