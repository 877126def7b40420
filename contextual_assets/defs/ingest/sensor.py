"""`new_documents`: the inbox (a folder or an object-store prefix) drives the `documents` partitions.

The tick itself (listing, settling, retries, give-ups) is `InboxWatcher` in the library
(`contextual_assets/ingest/inbox/watcher.py`); this sensor hands it the partitions and Dagster's run
history, and turns its outcome into run and partition requests. Removals it holds back (too many at once:
`CTX_INBOX_MAX_REMOVE`, `CTX_INBOX_MAX_REMOVE_SHARE`) are a warning in the tick's log and, when the tick
requests no run, its skip reason, in the UI's tick history, until `ctx inbox confirm-removals`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

import dagster as dg

from contextual_assets.defs.resources import ChunkStoreResource
from contextual_assets.ingest.inbox.watcher import RUN_KEY_TAG, FailedRun, InboxOptions, InboxWatcher, RunSpec
from contextual_assets.lifecycle.commit_reconcile import recover_dead_runs
from contextual_assets.names import CHUNK_EMBEDDINGS, INGEST_JOB
from contextual_assets.configuration import active_settings

from .assets import RETRYABLE
from .partitions import documents_partitions, range_run_tags

__all__ = ["DagsterRunHistory", "InboxOptions", "build_new_documents_sensor"]


class DagsterRunHistory:
    """`RunHistory` from the instance's run records and the runs' `chunk_embeddings` events."""

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance

    def failed_runs(self, tags: dict[str, str], updated_after: float) -> list[FailedRun]:
        records = self.instance.get_run_records(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED],
                                  updated_after=datetime.fromtimestamp(updated_after, tz=timezone.utc), tags=tags),
            order_by="update_timestamp", ascending=True)
        return [FailedRun(run_id=r.dagster_run.run_id, run_key=r.dagster_run.tags.get(RUN_KEY_TAG, ""),
                          created=r.create_timestamp.timestamp(), updated=r.update_timestamp.timestamp())
                for r in records]

    def committed(self, run: FailedRun, doc_ids: list[str]) -> set[str]:
        return {r.partition_key for r in self._records(self.instance.fetch_materializations, run, doc_ids)}

    def final_errors(self, run: FailedRun, doc_ids: list[str]) -> dict[str, str]:
        return {r.partition_key: _flag(r.asset_observation.metadata.get("error"))
                for r in self._records(self.instance.fetch_observations, run, doc_ids)
                if _flag(r.asset_observation.metadata.get(RETRYABLE)) is False}

    @staticmethod
    def _records(fetch, run: FailedRun, doc_ids: list[str]) -> list:
        """`chunk_embeddings` event records (`fetch`: the instance's public materialization or observation
        query) of `doc_ids` written by `run`."""
        records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey(CHUNK_EMBEDDINGS), asset_partitions=doc_ids,
                                               after_timestamp=run.created - 1)
        found, page_cursor = [], None
        while True:
            page = fetch(records_filter, limit=1000, cursor=page_cursor)
            found.extend(r for r in page.records if r.run_id == run.run_id and r.partition_key)
            if not page.has_more:
                return found
            page_cursor = page.cursor


def _flag(value):
    return getattr(value, "value", value)


def run_request(run: RunSpec) -> dg.RunRequest:
    if len(run.keys) == 1:
        return dg.RunRequest(run_key=run.run_key, partition_key=run.keys[0], tags=run.tags)
    return dg.RunRequest(run_key=run.run_key, tags={**run.tags, **range_run_tags(run.keys)})


# Dagster's sensor loop passes every 5 s and skips a sensor whose last tick began under its minimum interval
# ago; a tick's own start jitters, so a minimum equal to the loop's period skipped every other pass (ticks
# 5 or 10 s apart, measured by bench.freshness). One second less: a tick at the first pass after the interval.
SENSOR_LOOP_JITTER_S = 1


def sensor_minimum_interval(interval_s: int) -> int:
    return max(1, interval_s - SENSOR_LOOP_JITTER_S)


def build_new_documents_sensor(job: str | dg.JobDefinition | dg.UnresolvedAssetJobDefinition,
                               options: InboxOptions, clock: Callable[[], float] = time.time) -> dg.SensorDefinition:
    watcher = InboxWatcher(options, clock)

    @dg.sensor(
        name="new_documents",
        **({"job_name": job} if isinstance(job, str) else {"job": job}),
        minimum_interval_seconds=sensor_minimum_interval(options.interval_s),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Adds, re-runs, retries and removes document partitions from the inbox ({options.inbox}); "
                    f"holds removals of more than {options.max_remove} documents or {options.max_remove_share:g} of "
                    "them at once until `ctx inbox confirm-removals`.",
    )
    def new_documents(context: dg.SensorEvaluationContext, store: ChunkStoreResource):
        chunk_store = store.open()
        # Runs whose process died (a killed `ctx ingest`) release their ingest slots before this tick's
        # runs queue, and what failed runs committed without recording it shows as materialized.
        for line in recover_dead_runs(context.instance, chunk_store):
            context.log.warning(line)
        partitions = list(context.instance.get_dynamic_partitions(documents_partitions.name))
        outcome = watcher.tick(context.cursor, partitions, chunk_store, DagsterRunHistory(context.instance))
        if outcome.skipped:
            return dg.SkipReason(outcome.skipped)
        for level, text in outcome.messages:
            (context.log.warning if level == "warning" else context.log.info)(text)
        partition_requests = []
        if outcome.add_partitions:
            partition_requests.append(documents_partitions.build_add_request(outcome.add_partitions))
        if outcome.delete_partitions:
            partition_requests.append(documents_partitions.build_delete_request(outcome.delete_partitions))
        if outcome.held and not outcome.runs:  # shown as the tick's skip reason in the UI
            return dg.SensorResult(skip_reason=outcome.held, dynamic_partitions_requests=partition_requests,
                                   cursor=outcome.cursor)
        return dg.SensorResult(run_requests=[run_request(r) for r in outcome.runs],
                               dynamic_partitions_requests=partition_requests, cursor=outcome.cursor)

    return new_documents


@dg.definitions
def new_documents_sensor() -> dg.Definitions:
    return dg.Definitions(sensors=[build_new_documents_sensor(INGEST_JOB, InboxOptions.from_settings(active_settings()))])
