"""Store and event log made to agree after a run died between them.

A document is committed to the store first (one transaction, possibly with others of its run) and its
`chunk_embeddings` materialization is written after: the event log lives in Dagster's storage, not in the
store's transaction. A process killed in between leaves documents served by the index that the UI shows
as missing. `reconcile_failed_runs` looks at recently failed ingest runs: each document of such a run
that the store holds, written since the run started, from the source revision registered now, with no
materialization of that run, gets the materialization it lacks (runless, its metadata naming the run), so
the UI agrees with what is served. It is idempotent: a document already reconciled has a newer
materialization than its row, and is left alone.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg

from contextual_assets.models import DocumentRecord
from contextual_assets.names import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    CHUNK_EMBEDDINGS,
    CHUNK_HEADERS,
    DOCUMENTS_PARTITIONS,
    INGEST_JOB,
    PARSED_CHUNKS,
    PARTITION_TAG,
    PRODUCTION_ALIAS,
)
from contextual_assets.store import ChunkStore

from .run_liveness import fail_dead_runs

RECONCILED_FROM_RUN = "reconciled_from_run"
# Failed runs looked at per call: a sensor tick or a `ctx` command after a crash meets the last few.
RECENT_FAILED_RUNS = 20
RECENT_WINDOW = timedelta(days=1)  # the next tick or command comes long before; each looks again (idempotent)


def run_keys(tags: dict[str, str], ordered: list[str]) -> list[str]:
    """The document partitions a run covered: its partition, or its range in the partitions' order."""
    if PARTITION_TAG in tags:
        return [tags[PARTITION_TAG]]
    start, end = tags.get(ASSET_PARTITION_RANGE_START_TAG), tags.get(ASSET_PARTITION_RANGE_END_TAG)
    if start not in ordered or end not in ordered:
        return []
    return ordered[ordered.index(start): ordered.index(end) + 1]


def unrecorded(rows: list[DocumentRecord], registered: dict[str, str], recorded: set[str], started_at: str,
               production: str | None) -> list[DocumentRecord]:
    """The rows a run wrote (since `started_at`, of the revision registered now) whose document the run
    recorded no materialization for. A run writes the current version and, while production differs,
    production too (recorded as an observation, not a materialization): production's row counts only
    when it is the document's only one."""
    written = [r for r in rows if r.updated_at >= started_at and r.doc_id not in recorded
               and registered.get(r.doc_id) == r.file_hash]
    by_doc: dict[str, list[DocumentRecord]] = {}
    for row in written:
        by_doc.setdefault(row.doc_id, []).append(row)
    found = []
    for doc_rows in by_doc.values():
        current = [r for r in doc_rows if r.index_version != production] or doc_rows
        found.append(max(current, key=lambda r: r.updated_at))
    return found


def recover_dead_runs(instance: dg.DagsterInstance, store: ChunkStore) -> list[str]:
    """Before new runs (`ctx ingest`, `ctx eval`, each `new_documents` tick): fail the runs of this host whose
    process died (they hold ingest slots), then record what failed runs committed but never recorded; one
    line per thing done."""
    lines = [f"run {run_id} marked failed: its process is gone" for run_id in fail_dead_runs(instance)]
    reconciled = reconcile_failed_runs(instance, store)
    if reconciled:
        lines.append(f"{len(reconciled)} documents committed by a run that died before recording them now "
                     f"show as materialized: {', '.join(reconciled[:5])}{' ...' if len(reconciled) > 5 else ''}")
    return lines


def reconcile_failed_runs(instance: dg.DagsterInstance, store: ChunkStore) -> list[str]:
    """Materializations reported for documents committed by failed ingest runs that never recorded them;
    the documents' keys."""
    since = datetime.now(timezone.utc) - RECENT_WINDOW
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=INGEST_JOB, statuses=[dg.DagsterRunStatus.FAILURE], updated_after=since),
        limit=RECENT_FAILED_RUNS, order_by="update_timestamp", ascending=False)
    if not records:
        return []
    ordered = list(instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS))
    registered = {s.doc_id: s.file_hash for s in store.corpus.list_sources()}
    production = store.aliases.get(PRODUCTION_ALIAS)
    reconciled: list[str] = []
    for record in records:
        keys = [k for k in run_keys(dict(record.dagster_run.tags), ordered) if k in registered]
        if not keys:
            continue
        started_at = record.create_timestamp.astimezone(timezone.utc).isoformat(timespec="milliseconds")
        rows = store.corpus.documents(doc_ids=keys)  # the run's documents only: a tick must stay cheap
        latest = _latest_materializations(instance, keys)
        recorded = {k for k, (run_id, at) in latest.items() if run_id == record.dagster_run.run_id or at >= started_at}
        for row in unrecorded(rows, registered, recorded, started_at, production):
            _report(instance, row, record.dagster_run.run_id)
            reconciled.append(row.doc_id)
    return reconciled


def _latest_materializations(instance: dg.DagsterInstance, keys: list[str]) -> dict[str, tuple[str, str]]:
    """Partition -> (run id, ISO time) of its latest `chunk_embeddings` materialization."""
    latest: dict[str, tuple[str, str]] = {}
    records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey(CHUNK_EMBEDDINGS), asset_partitions=keys)
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=1000, cursor=cursor, ascending=False)
        for r in page.records:
            if r.partition_key and r.partition_key not in latest:
                at = datetime.fromtimestamp(r.timestamp, tz=timezone.utc).isoformat(timespec="milliseconds")
                latest[r.partition_key] = (r.run_id, at)
        if not page.has_more or len(latest) == len(keys):
            return latest
        cursor = page.cursor


def _report(instance: dg.DagsterInstance, row: DocumentRecord, run_id: str) -> None:
    metadata = {"index_version": row.index_version, "chunks": row.n_chunks, "file_hash": row.file_hash,
                RECONCILED_FROM_RUN: run_id,
                "note": f"committed by run {run_id}, which died before recording it; recorded from the store"}
    for asset in (PARSED_CHUNKS, CHUNK_HEADERS, CHUNK_EMBEDDINGS):
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=row.doc_id,
                                                                    metadata=metadata))
