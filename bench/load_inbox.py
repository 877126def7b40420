"""The load benchmark's inbox part: many settled files in an inbox, and the real `new_documents`
sensor's ticks over them (first, unchanged, one changed), timed."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path


def write_inbox(inbox: Path, n_docs: int, per_folder: int = 200, age_s: float = 3600.0) -> list[Path]:
    """`n_docs` small files, alternately .md and .txt, `per_folder` to a sub-folder, last modified
    `age_s` ago (files that have long settled, as in an inbox that is already full)."""
    paths = []
    then = time.time_ns() - int(age_s * 1e9)
    for i in range(n_docs):
        folder = inbox / f"team-{i // per_folder:03d}"
        if i % per_folder == 0:
            folder.mkdir(parents=True, exist_ok=True)
        if i % 2:
            path = folder / f"note {i:05d}.txt"
            path.write_text(f"Note {i}.\n\nPlain text about item {i}, owned by team {i // per_folder}.\n")
        else:
            path = folder / f"report-{i:05d}.md"
            path.write_text(f"# Report {i}\n\n## Summary\n\nRevenue of unit {i} grew {i % 17} percent.\n")
        os.utime(path, ns=(then, then))
        paths.append(path)
    return paths


def run_sensor(n_docs: int, workdir: Path, unchanged_ticks: int = 3) -> dict:
    import dagster as dg

    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.ingest.inbox.tick_plan import open_inbox
    from contextual_assets.settings import PlatformSettings
    from contextual_assets.store.shared import clear_store_cache

    inbox = workdir / "inbox"
    started = time.perf_counter()
    paths = write_inbox(inbox, n_docs)
    write_s = time.perf_counter() - started
    # The default settle delay (CTX_INBOX_SETTLE_S): the files are older than it, so taken at once.
    settings = PlatformSettings(home=str(workdir / ".ctx"), inbox=str(inbox),
                                duckdb_path=str(workdir / ".ctx" / "index.duckdb"), header_source="structural")
    defs = build_definitions(settings)
    sensor = defs.resolve_sensor_def("new_documents")
    store_resource = build_resources(settings)["store"]
    store = store_resource.open()  # migrate the store outside the timed ticks
    source = open_inbox(settings.inbox)
    (workdir / "dagster_home").mkdir(parents=True, exist_ok=True)
    result: dict = {"documents": n_docs, "write_inbox_s": round(write_s, 2), "settle_s": settings.inbox_settle_s,
                    "dagster_storage": "sqlite (DagsterInstance.local_temp)", "store": "duckdb"}
    with dg.DagsterInstance.local_temp(str(workdir / "dagster_home")) as instance:
        cursor: str | None = None

        def tick() -> dict:
            nonlocal cursor
            before = store.inbox_state.entries(source.location)
            t0 = time.perf_counter()
            with dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor,
                                         resources={"store": store_resource}, definitions=defs) as context:
                data = sensor.evaluate_tick(context)
            t1 = time.perf_counter()
            added = 0
            for request in data.dynamic_partitions_requests or []:
                if isinstance(request, dg.AddDynamicPartitionsRequest):
                    instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
                    added += len(request.partition_keys)
                else:
                    for key in request.partition_keys:
                        instance.delete_dynamic_partition(request.partitions_def_name, key)
            t2 = time.perf_counter()
            cursor = data.cursor or cursor
            after = store.inbox_state.entries(source.location)
            # Entries this tick wrote (new, changed or dropped), read back from the store outside the timing.
            written = sum(before.get(path) != row for path, row in after.items()) + len(set(before) - set(after))
            return {"tick_s": round(t1 - t0, 3), "apply_partitions_s": round(t2 - t1, 3),
                    "run_requests": len(data.run_requests or []), "partitions_added": added,
                    "cursor_bytes": len(cursor or ""), "entries_written": written}

        result["first_tick"] = tick()
        unchanged = [tick() for _ in range(max(1, unchanged_ticks))]
        result["unchanged_tick"] = {**unchanged[len(unchanged) // 2],
                                    "tick_s": round(statistics.median(t["tick_s"] for t in unchanged), 3),
                                    "tick_s_each": [t["tick_s"] for t in unchanged],
                                    "entries_written": max(t["entries_written"] for t in unchanged)}
        changed = paths[len(paths) // 2]
        changed.write_text(changed.read_text() + "\nAmended.\n")
        then = time.time_ns() - 30 * 1_000_000_000  # changed a while ago: settled, so taken this tick
        os.utime(changed, ns=(then, then))
        result["one_changed_tick"] = tick()

        timings, partitions = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            partitions = instance.get_dynamic_partitions("documents")
            timings.append(time.perf_counter() - t0)
        result["list_partitions"] = {"partitions": len(partitions), "median_s": round(statistics.median(timings), 4),
                                     "max_s": round(max(timings), 4), "runs": len(timings)}

        # Where an unchanged tick's time goes: listing the folder (stat only) and reading the state.
        t0 = time.perf_counter()
        listing = source.list()
        t1 = time.perf_counter()
        rows = store.inbox_state.entries(source.location)
        t2 = time.perf_counter()
        result["unchanged_parts"] = {"list_inbox_s": round(t1 - t0, 3), "read_state_s": round(t2 - t1, 3),
                                     "files": len(listing.files), "entries": len(rows)}
        result["sources_registered"] = len(store.corpus.list_sources())
        # For comparison: the same sources registered in one `register_sources` transaction on a fresh store
        # (what the first tick does, as part of its time).
        from contextual_assets.models import SourceRecord
        from contextual_assets.store import open_store

        bulk_store = open_store(None, workdir / "bulk-sources.duckdb")
        records = [SourceRecord(doc_id=r.doc_id, path=r.path, file_hash=r.revision) for r in rows.values()]
        t0 = time.perf_counter()
        bulk_store.corpus.register_sources(records)
        result["register_sources_bulk_s"] = round(time.perf_counter() - t0, 3)
        bulk_store.close()
    clear_store_cache()
    return result
