"""`InboxWatcher`: one whole tick of the inbox sensor, as library code.

A tick lists the inbox and compares it with the per-entry state kept in the store (`plan_tick`): a new
or changed file is taken once it has settled (`CTX_INBOX_SETTLE_S`), registered and requested; a removed
one loses its partition and its rows; a refused one is logged once. Documents whose run failed are
requested again after `CTX_INBOX_RETRY_BASE_S` x 2^n seconds, up to `CTX_INBOX_RETRY_LIMIT` times, or
given up when the run says a retry would fail the same way. Only entries that changed are written; the
cursor is a tick counter and two timestamps. A tick that would remove too many documents at once removes
none and holds them (`removal_guard`) until `ctx inbox confirm-removals`; a purge keeps a document's rows
in the versions production can roll back to (`Corpus.purge_document`), released once they no longer can.

The orchestrator (the Dagster sensor) supplies the partitions it knows and its run history
(`RunHistory`), and turns the `TickOutcome` into its own run and partition requests.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from contextual_assets.configuration import configuration_values, configured_by
from contextual_assets.models import SourceRecord
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore
from contextual_assets.store.inbox_state import HeldRemoval, InboxEntryRow

from contextual_assets.ingest.inbox.tick_plan import (
    InboxUnavailable,
    Registry,
    TickPlan,
    TickSettings,
    open_inbox,
    pending_change,
    plan_tick,
    run_key_part,
)
from contextual_assets.ingest.inbox.partition_ranges import first_run_size, partition_ranges

TRIGGER_TAG, INBOX_TAG, RUN_KEY_TAG = "ctx/trigger", "ctx/inbox", "ctx/run_key"
# Failed runs are looked up from a little before the newest one already seen: run storage may
# commit updates slightly out of order, and a run seen twice is ignored the second time.
FAILED_RUNS_OVERLAP_S = 60.0


class InboxOptions(configured_by("inbox")):
    """What the watcher needs from the settings: the fields come from the declarations that set `inbox.*`."""

    @property
    def max_bytes(self) -> int:
        return int(self.max_file_mb * 1_000_000)

    @classmethod
    def from_settings(cls, settings: PlatformSettings) -> InboxOptions:
        return cls(**configuration_values("inbox", settings))


class SensorCursor(BaseModel):
    """The whole cursor: the inbox's state lives in the store."""

    # The older cursor (the whole inbox state) must not validate as this one with defaults.
    model_config = ConfigDict(extra="forbid")

    tick: int = 0  # the last tick Dagster committed; entries requested by a later one are requested again
    runs_until: float = 0.0  # update time of the newest failed run looked at
    scanned_at: float = 0.0

    @classmethod
    def load(cls, text: str | None, now: float) -> SensorCursor:
        if text:
            try:
                return cls.model_validate_json(text)
            except ValidationError:
                pass  # the older cursor (the whole inbox state): the store's state takes over
        return cls(runs_until=now)


class FailedRun(BaseModel):
    run_id: str
    run_key: str
    created: float  # timestamps, seconds
    updated: float


class RunHistory(Protocol):
    """The orchestrator's record of the runs the watcher requested (Dagster's run and event storage)."""

    def failed_runs(self, tags: dict[str, str], updated_after: float) -> list[FailedRun]:
        """Failed or cancelled runs with these tags, oldest update first."""
        ...

    def committed(self, run: FailedRun, doc_ids: list[str]) -> set[str]:
        """Which of `doc_ids` the run committed anyway."""
        ...

    def final_errors(self, run: FailedRun, doc_ids: list[str]) -> dict[str, str]:
        """The documents the run itself says cannot pass as they are (parse error, changed meanwhile)."""
        ...


class RunSpec(BaseModel):
    """One run over a contiguous range of document partitions."""

    run_key: str
    keys: list[str]
    tags: dict[str, str]


class TickOutcome(BaseModel):
    runs: list[RunSpec] = []
    add_partitions: list[str] = []
    delete_partitions: list[str] = []
    messages: list[tuple[str, str]] = []  # (level, text)
    cursor: str | None = None
    skipped: str | None = None  # the inbox could not be listed: nothing changed
    held: str | None = None  # why removals were held back this tick (they wait for a confirmation)


class InboxWatcher:
    def __init__(self, options: InboxOptions, clock: Callable[[], float] = time.time):
        self.options, self.clock = options, clock
        self.inbox = open_inbox(options.inbox)

    def tick(self, cursor_text: str | None, partitions: list[str], store: ChunkStore,
             history: RunHistory) -> TickOutcome:
        """One tick against `partitions` (the document partitions, in order) and the store's state."""
        now = self.clock()
        cursor = SensorCursor.load(cursor_text, now)
        try:
            listing = self.inbox.list()
        except InboxUnavailable as exc:
            return TickOutcome(skipped=str(exc))  # the cursor and the state stay as they were
        rows = store.inbox_state.entries(self.inbox.location)
        held = store.inbox_state.held_removals(self.inbox.location)
        existing = set(partitions)
        settings = TickSettings(now=now, tick=cursor.tick + 1, committed_tick=cursor.tick,
                                settle_s=self.options.settle_s, max_bytes=self.options.max_bytes,
                                retry_limit=self.options.retry_limit, max_remove=self.options.max_remove,
                                max_remove_share=self.options.max_remove_share)
        registry = Registry(lambda: {s.doc_id: (s.path, s.file_hash) for s in store.corpus.list_sources()},
                            store.inbox_state.held_revisions)
        plan = plan_tick(self.inbox, listing, rows, existing, registry, settings, held)
        runs_until = self._record_failed_runs(history, plan, cursor, now)
        self._request_due_retries(plan, settings)
        outcome = self._apply(plan, rows, held, partitions, store, settings.tick)
        outcome.cursor = SensorCursor(tick=settings.tick, runs_until=round(runs_until, 3),
                                      scanned_at=round(now, 3)).model_dump_json()
        return outcome

    def _apply(self, plan: TickPlan, rows: dict[str, InboxEntryRow], held: dict[str, HeldRemoval],
               partitions: list[str], store: ChunkStore, tick: int) -> TickOutcome:
        """Writes the tick's state (sources, purges, entries, held removals) and says which runs and
        partitions follow."""
        existing = set(partitions)
        # Sources first: an entry saved as taken always has its source registered. One transaction for
        # every new revision (one per file is minutes for 10,000 files on DuckDB).
        store.corpus.register_sources([
            SourceRecord(doc_id=plan.rows[p].doc_id, path=self.inbox.source_path(p), file_hash=plan.rows[p].revision)
            for p in plan.taken])
        requested = {plan.rows[p].doc_id: p for p in plan.requests if plan.rows[p].status == "requested"}
        removed = set(plan.removed) - set(requested)
        added = sorted(k for k in requested if k not in existing)
        # Several documents per run (as a backfill does); new partitions are appended in `added` order,
        # so they and runs of neighbouring changed ones form contiguous partition ranges, cut into runs
        # of even estimated cost (file size).
        order = [k for k in partitions if k not in removed] + added
        runs: list[RunSpec] = []
        for group in request_groups(plan, requested):
            # The tick's first run is small when its documents are new (not when they keep a run key: a
            # group requested again must keep its runs): it reaches the fleet while the next is created.
            fresh = not runs and not any(plan.rows[requested[k]].run_key or plan.rows[requested[k]].failed_attempts
                                         for k in group)
            runs.extend(self._run(plan, [requested[k] for k in keys], tick)
                        for keys in partition_ranges(order, group, self.options.partitions_per_run,
                                                     cost=lambda k: plan.rows[requested[k]].size,
                                                     first_run=first_run_size(self.options.partitions_per_run)
                                                     if fresh else None))
        messages = list(plan.messages)
        purged = {key: store.corpus.purge_document(key, PRODUCTION_ALIAS) for key in sorted(removed)}
        kept: dict[str, list[str]] = {}
        for version, doc_ids in (store.corpus.retained() if purged else {}).items():
            for doc_id in doc_ids:
                kept.setdefault(doc_id, []).append(version)
        for key, count in purged.items():
            where = f" (kept in {', '.join(kept[key])}, which {PRODUCTION_ALIAS} can roll back to)" \
                if key in kept else ""
            messages.append(("info", f"{key}: purged {count} chunks{where}"))
        released = store.corpus.release_retained(PRODUCTION_ALIAS)
        if released:
            messages.append(("info", f"purged {released} chunks kept for versions {PRODUCTION_ALIAS} can no longer "
                                     "roll back to"))
        store.inbox_state.save_entries(
            self.inbox.location, [r for p, r in plan.rows.items() if rows.get(p) != r and p not in plan.deletes],
            plan.deletes)
        store.inbox_state.save_held_removals(self.inbox.location, [h for h in plan.held if held.get(h.path) != h],
                                             plan.released)
        return TickOutcome(runs=runs, add_partitions=added, delete_partitions=sorted(removed & existing),
                           messages=messages, held=plan.hold_reason)

    def _run(self, plan: TickPlan, paths: Sequence[str], tick: int) -> RunSpec:
        """One run over the documents at `paths` (a contiguous partition range); the run key names each
        document's revision and retry, so a repeated tick launches nothing twice and a retry is a new run.
        Documents requested again together keep their run key."""
        rows = [plan.rows[p] for p in paths]
        parts = [run_key_part(r) for r in rows]
        keys = [r.doc_id for r in rows]
        run_key = rows[0].run_key if rows[0].run_key and all(r.run_key == rows[0].run_key for r in rows) else \
            parts[0] if len(rows) == 1 else \
            f"{keys[0]}..{keys[-1]}#{hashlib.sha256(';'.join(parts).encode()).hexdigest()[:24]}"
        tags = {TRIGGER_TAG: "inbox", INBOX_TAG: self.inbox.location, RUN_KEY_TAG: run_key,
                "ctx/documents": str(len(rows))}
        for path in paths:
            plan.rows[path] = plan.rows[path].model_copy(update={"run_key": run_key, "requested_tick": tick})
        if len(rows) == 1:
            tags["ctx/revision"] = rows[0].revision or ""
            if not (rows[0].revision or "").count(":"):
                tags["ctx/file_sha256"] = rows[0].revision or ""
        return RunSpec(run_key=run_key, keys=keys, tags=tags)

    def _record_failed_runs(self, history: RunHistory, plan: TickPlan, cursor: SensorCursor, now: float) -> float:
        """Failed runs this watcher requested, since the last look: each document of such a run that did
        not commit is scheduled for a retry or given up. Returns the newest failed run's update time.

        The orchestrator's run records are the source of truth for "the run failed" (whatever failed: a
        document, the step after its retries, the run worker); the run's commits say which of its
        documents committed anyway. The store cannot tell a failed run from one still queued."""
        waiting: dict[str, list[str]] = {}
        for path, row in plan.rows.items():
            if row.status == "requested" and row.run_key:
                waiting.setdefault(row.run_key, []).append(path)
        tags = {TRIGGER_TAG: "inbox", INBOX_TAG: self.inbox.location}
        until = cursor.runs_until
        for run in history.failed_runs(tags, max(0.0, cursor.runs_until - FAILED_RUNS_OVERLAP_S)):
            until = max(until, run.updated)
            paths = waiting.pop(run.run_key, [])
            if not paths:
                continue  # not this revision's current request, or already counted
            doc_ids = [plan.rows[p].doc_id for p in paths]
            committed = history.committed(run, doc_ids)
            final = history.final_errors(run, doc_ids)
            for path in paths:
                doc_id = plan.rows[path].doc_id
                if doc_id not in committed:
                    plan.rows[path] = self._failed(plan.rows[path], run.run_id, now, plan, final.get(doc_id))
        return until

    def _failed(self, row: InboxEntryRow, run_id: str, now: float, plan: TickPlan,
                final: str | None = None) -> InboxEntryRow:
        """`final`: the run's reason why the document cannot pass as it is (given up at once)."""
        attempts, limit = row.failed_attempts + 1, self.options.retry_limit
        if final is not None:
            plan.messages.append(("warning", f"{row.doc_id}: run {run_id} failed and a retry would fail the same "
                                             f"way ({final}); fix the file and save it again to try again"))
            return row.model_copy(update={"status": "gave_up", "failed_attempts": attempts, "next_retry": None,
                                          "reason": f"run {run_id}: {final}"[:500]})
        if attempts > limit:
            plan.messages.append(("warning", f"{row.doc_id}: gave up after {attempts} failed run(s), the last "
                                             f"{run_id}; fix the file and save it again (or touch it) to try again"))
            return row.model_copy(update={"status": "gave_up", "failed_attempts": attempts, "next_retry": None,
                                          "reason": f"run {run_id} failed"})
        delay = self.options.retry_base_s * 2 ** (attempts - 1)
        plan.messages.append(("warning", f"{row.doc_id}: run {run_id} failed; retry {attempts} of {limit} "
                                         f"in {delay:g} s"))
        return row.model_copy(update={"status": "retrying", "failed_attempts": attempts, "next_retry": now + delay,
                                      "reason": f"run {run_id} failed"})

    def _request_due_retries(self, plan: TickPlan, settings: TickSettings) -> None:
        held = {h.path for h in plan.held}
        for path, row in plan.rows.items():
            if (row.status != "retrying" or row.next_retry is None or row.next_retry > settings.now
                    or pending_change(row) or path in held):
                continue  # a file being changed is retried as its new revision once that settles; a missing one not
            plan.rows[path] = row.model_copy(update={"status": "requested", "next_retry": None,
                                                     "requested_tick": settings.tick, "run_key": None})
            plan.requests.append(path)
            plan.messages.append(("info", f"{row.doc_id}: retry {row.failed_attempts} of {self.options.retry_limit} "
                                          f"requested ({row.reason})"))


def request_groups(plan: TickPlan, requested: dict[str, str]) -> list[list[str]]:
    """The documents to request, in groups that may share a run: requests made again (a tick whose
    cursor was not committed, or a reset cursor) keep the groups, and so the run keys, they were first
    requested with, so Dagster drops every one already launched; a retry runs alone; new ones form one
    group."""
    again: dict[str, list[str]] = {}
    fresh: list[str] = []
    retries: list[list[str]] = []
    for key, path in requested.items():
        row = plan.rows[path]
        if row.run_key:
            again.setdefault(row.run_key, []).append(key)
        elif row.failed_attempts:
            retries.append([key])  # alone: a document that kills its run must not fail its neighbours again
        else:
            fresh.append(key)
    return [group for group in [*again.values(), *retries, fresh] if group]
