"""`new_documents`: the inbox (a folder or an object-store prefix) drives the `documents` partitions.

Each tick lists the inbox and compares it with the per-entry state kept in the store
(`ctx_inbox_entries`, see `ingest.inbox.plan_tick`): a new or changed file is taken once it has
settled (`CTX_INBOX_SETTLE_S`), added as a partition, registered and requested; a removed one loses
its partition and its rows; a refused one (file type, size, key) is logged once. Documents whose run
failed are requested again after `CTX_INBOX_RETRY_BASE_S` x 2^n seconds, up to `CTX_INBOX_RETRY_LIMIT`
times. Only entries that changed are written; the cursor is a tick counter and two timestamps.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import dagster as dg
from pydantic import BaseModel, ConfigDict, ValidationError

from contextual_assets.defs.ingest_assets import ASSET_OF_STAGE, RETRYABLE
from contextual_assets.defs.partitions import (
    documents_partitions,
    partition_ranges,
    range_run_tags,
)
from contextual_assets.defs.resources import ChunkStoreResource
from contextual_assets.ingest.inbox import (
    Inbox,
    InboxUnavailable,
    Registry,
    TickPlan,
    TickSettings,
    open_inbox,
    pending_change,
    plan_tick,
    run_key_part,
)
from contextual_assets.models import SourceRecord
from contextual_assets.settings import PlatformSettings
from contextual_assets.store.inbox_state import InboxEntryRow

TRIGGER_TAG, INBOX_TAG, RUN_KEY_TAG = "ctx/trigger", "ctx/inbox", "ctx/run_key"
# Failed runs are looked up from a little before the newest one already seen: run storage may
# commit updates slightly out of order, and a run seen twice is ignored the second time.
FAILED_RUNS_OVERLAP_S = 60.0


class InboxOptions(BaseModel):
    """What the sensor needs from the settings."""

    inbox: str
    partitions_per_run: int
    settle_s: float = PlatformSettings.default("inbox_settle_s")
    retry_limit: int = PlatformSettings.default("inbox_retry_limit")
    retry_base_s: float = PlatformSettings.default("inbox_retry_base_s")
    max_bytes: int = int(PlatformSettings.default("max_file_mb") * 1_000_000)
    interval_s: int = 15

    @classmethod
    def from_settings(cls, settings: PlatformSettings) -> InboxOptions:
        return cls(inbox=settings.inbox, partitions_per_run=settings.partitions_per_run,
                   settle_s=settings.inbox_settle_s, retry_limit=settings.inbox_retry_limit,
                   retry_base_s=settings.inbox_retry_base_s, max_bytes=int(settings.max_file_mb * 1_000_000))


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


def build_new_documents_sensor(job, options: InboxOptions,
                               clock: Callable[[], float] = time.time) -> dg.SensorDefinition:
    inbox = open_inbox(options.inbox)

    @dg.sensor(
        name="new_documents",
        job=job,
        minimum_interval_seconds=options.interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Adds, re-runs, retries and removes document partitions from the inbox ({options.inbox}).",
    )
    def new_documents(context: dg.SensorEvaluationContext, store: ChunkStoreResource):
        now = clock()
        cursor = SensorCursor.load(context.cursor, now)
        try:
            listing = inbox.list()
        except InboxUnavailable as exc:
            return dg.SkipReason(str(exc))  # the cursor and the state stay as they were
        chunk_store = store.open()
        rows = chunk_store.inbox_entries(inbox.location)
        ordered = list(context.instance.get_dynamic_partitions(documents_partitions.name))
        existing = set(ordered)
        settings = TickSettings(now=now, tick=cursor.tick + 1, committed_tick=cursor.tick, settle_s=options.settle_s,
                                max_bytes=options.max_bytes, retry_limit=options.retry_limit)
        registry = Registry(lambda: {s.doc_id: (s.path, s.file_hash) for s in chunk_store.list_sources()},
                            chunk_store.held_revisions)
        plan = plan_tick(inbox, listing, rows, existing, registry, settings)
        runs_until = record_failed_runs(context.instance, inbox, plan, cursor, options, now)
        request_due_retries(plan, options, settings)
        for level, text in plan.messages:
            (context.log.warning if level == "warning" else context.log.info)(text)

        # Sources first: an entry saved as taken always has its source registered. One transaction for
        # every new revision (one per file is minutes for 10,000 files on DuckDB).
        chunk_store.register_sources([
            SourceRecord(doc_id=plan.rows[p].doc_id, path=inbox.source_path(p), file_hash=plan.rows[p].revision)
            for p in plan.taken])
        requested = {plan.rows[p].doc_id: p for p in plan.requests if plan.rows[p].status == "requested"}
        removed = set(plan.removed) - set(requested)
        added = sorted(k for k in requested if k not in existing)
        # Several documents per run (as a backfill does); new partitions are appended in `added` order,
        # so they and runs of neighbouring changed ones form contiguous partition ranges, cut into runs
        # of even estimated cost (file size).
        order = [k for k in ordered if k not in removed] + added
        run_requests = [run_request(inbox, plan, [requested[k] for k in keys], settings.tick)
                        for group in request_groups(plan, requested)
                        for keys in partition_ranges(order, group, options.partitions_per_run,
                                                     cost=lambda k: plan.rows[requested[k]].size)]
        for key in sorted(removed):
            purged = chunk_store.purge_document(key)
            context.log.info(f"{key}: purged {purged} chunks")
        chunk_store.save_inbox_entries(
            inbox.location, [r for p, r in plan.rows.items() if rows.get(p) != r and p not in plan.deletes],
            plan.deletes)

        partition_requests = []
        if added:
            partition_requests.append(documents_partitions.build_add_request(added))
        if removed & existing:
            partition_requests.append(documents_partitions.build_delete_request(sorted(removed & existing)))
        return dg.SensorResult(
            run_requests=run_requests,
            dynamic_partitions_requests=partition_requests,
            cursor=SensorCursor(tick=settings.tick, runs_until=round(runs_until, 3),
                                scanned_at=round(now, 3)).model_dump_json(),
        )

    return new_documents


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


def run_request(inbox: Inbox, plan: TickPlan, paths: Sequence[str], tick: int) -> dg.RunRequest:
    """One run over the documents at `paths` (a contiguous partition range); the run key names each
    document's revision and retry, so a repeated tick launches nothing twice and a retry is a new run.
    Documents requested again together keep their run key."""
    rows = [plan.rows[p] for p in paths]
    parts = [run_key_part(r) for r in rows]
    keys = [r.doc_id for r in rows]
    run_key = rows[0].run_key if rows[0].run_key and all(r.run_key == rows[0].run_key for r in rows) else \
        parts[0] if len(rows) == 1 else \
        f"{keys[0]}..{keys[-1]}#{hashlib.sha256(';'.join(parts).encode()).hexdigest()[:24]}"
    tags = {TRIGGER_TAG: "inbox", INBOX_TAG: inbox.location, RUN_KEY_TAG: run_key, "ctx/documents": str(len(rows))}
    for path in paths:
        plan.rows[path] = plan.rows[path].model_copy(update={"run_key": run_key, "requested_tick": tick})
    if len(rows) == 1:
        tags["ctx/revision"] = rows[0].revision or ""
        if not (rows[0].revision or "").count(":"):
            tags["ctx/file_sha256"] = rows[0].revision or ""
        return dg.RunRequest(run_key=run_key, partition_key=keys[0], tags=tags)
    return dg.RunRequest(run_key=run_key, tags={**tags, **range_run_tags(keys)})


def record_failed_runs(instance: dg.DagsterInstance, inbox: Inbox, plan: TickPlan, cursor: SensorCursor,
                       options: InboxOptions, now: float) -> float:
    """Failed runs this sensor requested, since the last look: each document of such a run that did not
    commit is scheduled for a retry or given up. Returns the newest failed run's update time.

    Dagster's run records are the source of truth for "the run failed" (whatever failed: a document,
    the step after its retries, the run worker); the run's materializations say which of its documents
    committed anyway. The store cannot tell a failed run from one still queued."""
    waiting: dict[str, list[str]] = {}
    for path, row in plan.rows.items():
        if row.status == "requested" and row.run_key:
            waiting.setdefault(row.run_key, []).append(path)
    after = datetime.fromtimestamp(max(0.0, cursor.runs_until - FAILED_RUNS_OVERLAP_S), tz=timezone.utc)
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED], updated_after=after,
                              tags={TRIGGER_TAG: "inbox", INBOX_TAG: inbox.location}),
        order_by="update_timestamp", ascending=True)
    until = cursor.runs_until
    for record in records:
        until = max(until, record.update_timestamp.timestamp())
        run = record.dagster_run
        paths = waiting.pop(run.tags.get(RUN_KEY_TAG, ""), [])
        if not paths:
            continue  # not this revision's current request, or already counted
        doc_ids = [plan.rows[p].doc_id for p in paths]
        created = record.create_timestamp.timestamp()
        committed = {r.partition_key for r in run_records(instance.fetch_materializations, run.run_id, doc_ids,
                                                          created)}
        # A document the run itself says cannot pass as it is (parse error, changed meanwhile): no retry.
        final = {r.partition_key: r.asset_observation.metadata.get("error")
                 for r in run_records(instance.fetch_observations, run.run_id, doc_ids, created)
                 if _flag(r.asset_observation.metadata.get(RETRYABLE)) is False}
        for path in paths:
            doc_id = plan.rows[path].doc_id
            if doc_id not in committed:
                plan.rows[path] = failed(plan.rows[path], run.run_id, options, now, plan,
                                         final=_flag(final[doc_id]) if doc_id in final else None)
    return until


def _flag(value):
    return getattr(value, "value", value)


def run_records(fetch, run_id: str, doc_ids: list[str], created: float) -> list:
    """`chunk_embeddings` event records (`fetch`: the instance's public materialization or observation
    query) of `doc_ids` written by run `run_id`."""
    records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey(ASSET_OF_STAGE["committed"]),
                                           asset_partitions=doc_ids, after_timestamp=created - 1)
    found, page_cursor = [], None
    while True:
        page = fetch(records_filter, limit=1000, cursor=page_cursor)
        found.extend(r for r in page.records if r.run_id == run_id and r.partition_key)
        if not page.has_more:
            return found
        page_cursor = page.cursor


def failed(row: InboxEntryRow, run_id: str, options: InboxOptions, now: float, plan: TickPlan,
           final: str | None = None) -> InboxEntryRow:
    """`final`: the run's reason why the document cannot pass as it is (given up at once)."""
    attempts = row.failed_attempts + 1
    if final is not None:
        plan.messages.append(("warning", f"{row.doc_id}: run {run_id} failed and a retry would fail the same way "
                                         f"({final}); fix the file and save it again to try again"))
        return row.model_copy(update={"status": "gave_up", "failed_attempts": attempts, "next_retry": None,
                                      "reason": f"run {run_id}: {final}"[:500]})
    if attempts > options.retry_limit:
        plan.messages.append(("warning", f"{row.doc_id}: gave up after {attempts} failed run(s), the last {run_id}; "
                                         "fix the file and save it again (or touch it) to try again"))
        return row.model_copy(update={"status": "gave_up", "failed_attempts": attempts, "next_retry": None,
                                      "reason": f"run {run_id} failed"})
    delay = options.retry_base_s * 2 ** (attempts - 1)
    plan.messages.append(("warning", f"{row.doc_id}: run {run_id} failed; retry {attempts} of {options.retry_limit} "
                                     f"in {delay:g} s"))
    return row.model_copy(update={"status": "retrying", "failed_attempts": attempts, "next_retry": now + delay,
                                  "reason": f"run {run_id} failed"})


def request_due_retries(plan: TickPlan, options: InboxOptions, settings: TickSettings) -> None:
    for path, row in plan.rows.items():
        if row.status != "retrying" or row.next_retry is None or row.next_retry > settings.now or pending_change(row):
            continue  # a file being changed is retried as its new revision once that settles
        plan.rows[path] = row.model_copy(update={"status": "requested", "next_retry": None,
                                                 "requested_tick": settings.tick, "run_key": None})
        plan.requests.append(path)
        plan.messages.append(("info", f"{row.doc_id}: retry {row.failed_attempts} of {options.retry_limit} "
                                      f"requested ({row.reason})"))
