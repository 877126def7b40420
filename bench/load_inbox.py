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
        ticks = SensorTicks(instance, defs, sensor, store_resource, store, source)
        result.update(ticks.timed(paths, unchanged_ticks))
        result["list_partitions"] = list_partitions(instance)
        # Where an unchanged tick's time goes: listing the folder (stat only) and reading the state.
        result["unchanged_parts"], rows = unchanged_parts(store, source)
        result["sources_registered"] = len(store.corpus.list_sources())
        result["register_sources_bulk_s"] = register_sources_bulk(workdir, rows)
    clear_store_cache()
    return result


class SensorTicks:
    """The real `new_documents` sensor's ticks over the inbox, each applying its partition requests
    to the instance and carrying its cursor to the next."""

    def __init__(self, instance, defs, sensor, store_resource, store, source):
        self.instance, self.defs, self.sensor, self.store_resource = instance, defs, sensor, store_resource
        self.store, self.source = store, source
        self.cursor: str | None = None

    def timed(self, paths: list[Path], unchanged_ticks: int) -> dict:
        """The first tick (every file new), ticks with nothing changed (median), one changed file's."""
        result = {"first_tick": self.tick()}
        unchanged = [self.tick() for _ in range(max(1, unchanged_ticks))]
        result["unchanged_tick"] = {**unchanged[len(unchanged) // 2],
                                    "tick_s": round(statistics.median(t["tick_s"] for t in unchanged), 3),
                                    "tick_s_each": [t["tick_s"] for t in unchanged],
                                    "entries_written": max(t["entries_written"] for t in unchanged)}
        changed = paths[len(paths) // 2]
        changed.write_text(changed.read_text() + "\nAmended.\n")
        then = time.time_ns() - 30 * 1_000_000_000  # changed a while ago: settled, so taken this tick
        os.utime(changed, ns=(then, then))
        result["one_changed_tick"] = self.tick()
        return result

    def tick(self) -> dict:
        import dagster as dg

        before = self.store.inbox_state.entries(self.source.location)
        t0 = time.perf_counter()
        with dg.build_sensor_context(instance_ref=self.instance.get_ref(), cursor=self.cursor,
                                     resources={"store": self.store_resource}, definitions=self.defs) as context:
            data = self.sensor.evaluate_tick(context)
        t1 = time.perf_counter()
        added = 0
        for request in data.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
                added += len(request.partition_keys)
            else:
                for key in request.partition_keys:
                    self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        t2 = time.perf_counter()
        self.cursor = data.cursor or self.cursor
        after = self.store.inbox_state.entries(self.source.location)
        # Entries this tick wrote (new, changed or dropped), read back from the store outside the timing.
        written = sum(before.get(path) != row for path, row in after.items()) + len(set(before) - set(after))
        return {"tick_s": round(t1 - t0, 3), "apply_partitions_s": round(t2 - t1, 3),
                "run_requests": len(data.run_requests or []), "partitions_added": added,
                "cursor_bytes": len(self.cursor or ""), "entries_written": written}


def list_partitions(instance) -> dict:
    """Listing the `documents` partitions, 5 times: the median and the slowest."""
    timings, partitions = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        partitions = instance.get_dynamic_partitions("documents")
        timings.append(time.perf_counter() - t0)
    return {"partitions": len(partitions), "median_s": round(statistics.median(timings), 4),
            "max_s": round(max(timings), 4), "runs": len(timings)}


def unchanged_parts(store, source) -> tuple[dict, dict]:
    """Listing the inbox folder (stat only) and reading the sensor's state, timed; and the state's rows."""
    t0 = time.perf_counter()
    listing = source.list()
    t1 = time.perf_counter()
    rows = store.inbox_state.entries(source.location)
    t2 = time.perf_counter()
    return {"list_inbox_s": round(t1 - t0, 3), "read_state_s": round(t2 - t1, 3),
            "files": len(listing.files), "entries": len(rows)}, rows


def register_sources_bulk(workdir: Path, rows: dict) -> float:
    """For comparison: the same sources registered in one `register_sources` transaction on a fresh
    store (what the first tick does, as part of its time), timed."""
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    bulk_store = open_store(None, workdir / "bulk-sources.duckdb")
    records = [SourceRecord(doc_id=r.doc_id, path=r.path, file_hash=r.revision) for r in rows.values()]
    t0 = time.perf_counter()
    bulk_store.corpus.register_sources(records)
    seconds = round(time.perf_counter() - t0, 3)
    bulk_store.close()
    return seconds
