"""What Dagster's event log costs per document: partitioned materializations yielded by one step, as the
ingest step yields them (three per document: parsed_chunks, chunk_headers, chunk_embeddings).

    python -m bench.dagster_events --json bench/results/dagster_events.json

The step thread writes each event before it takes the next (`DagsterInstance.handle_new_event`; OSS
storages have no batched write for them), so `ms_per_event` x 3 bounds how many documents per second
one ingest run can report, whatever the fleet does. Storages: the shipped dagster.yaml's SQLite under a
temporary DAGSTER_HOME, and Postgres (pgserver on this machine, `--storages sqlite,postgres`). The
metadata is the size of a real `chunk_headers` materialization's; `--documents` per round, `--runs`
rounds, the median reported.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

from bench.report import write_json

ASSETS = ("parsed_chunks", "chunk_headers", "chunk_embeddings")


def header_metadata() -> dict:
    """A `chunk_headers` materialization's metadata, as large as the ingest step writes with a fleet."""
    return {"header_source": "openai", "header_model": "m", "prompt_version": "v2", "source_warning": "none",
            "chunks": 3, "mean_header_words": 17.3, "index_version": "iv-0123456789ab", "headers_s": 0.41,
            "served_model": "m", "model_revision": "r", "requests": 3, "sent": 3, "retries": 0,
            "replica_share": dg.MetadataValue.json({f"http://replica-{i}:8000": 0.25 for i in range(4)}),
            "routed_on": dg.MetadataValue.json({f"http://replica-{i}:8000": "vllm" for i in range(4)}),
            "example_header": "The section sets the maintenance interval of the relief valves at station four."}


def seconds_per_event(instance, documents: int) -> tuple[float, float]:
    """Seconds per yielded materialization, timed inside the step from the first yield to the last: wall,
    and the step thread's CPU time (`time.thread_time`: what the event costs this process, not the wait
    on the storage)."""
    partitions = dg.DynamicPartitionsDefinition(name="documents")
    keys = [f"doc-{i:05d}.md" for i in range(documents)]
    instance.add_dynamic_partitions("documents", keys)
    timing: dict[str, float] = {}
    metadata = header_metadata()

    @dg.multi_asset(specs=[dg.AssetSpec(ASSETS[0], skippable=True),
                           dg.AssetSpec(ASSETS[1], deps=[ASSETS[0]], skippable=True),
                           dg.AssetSpec(ASSETS[2], deps=[ASSETS[1]], skippable=True)],
                    partitions_def=partitions, can_subset=False)
    def step(context):
        started, cpu = time.perf_counter(), time.thread_time()
        for key in context.partition_keys:
            for asset in ASSETS:
                yield dg.AssetMaterialization(asset_key=asset, partition=key,
                                              metadata=metadata if asset == ASSETS[1] else {"chunks": 3})
        timing["s"], timing["cpu_s"] = time.perf_counter() - started, time.thread_time() - cpu

    dg.materialize([step], instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                                    "dagster/asset_partition_range_end": keys[-1]})
    events = len(ASSETS) * documents
    return timing["s"] / events, timing["cpu_s"] / events


def postgres_instance_yaml(home: Path) -> object:
    import uuid

    import pgserver

    server = pgserver.get_server(Path(tempfile.mkdtemp(prefix="bench-events-pg-")), cleanup_mode="stop")
    name = f"events_{uuid.uuid4().hex[:12]}"
    server.psql(f"CREATE DATABASE {name};")
    # dagster-postgres is written for psycopg2 (see deploy/dagster.postgres.yaml).
    url = server.get_uri().replace("/postgres?", f"/{name}?", 1).replace("postgresql://", "postgresql+psycopg2://", 1)
    (home / "dagster.yaml").write_text(f'storage:\n  postgres:\n    postgres_url: "{url}"\n')
    return server


def measure(storage: str, documents: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        home = Path(tmp)
        server = postgres_instance_yaml(home) if storage == "postgres" else None
        try:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                return seconds_per_event(instance, documents)
        finally:
            if server is not None:
                server.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--storages", default="sqlite,postgres")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    print(f"{'storage':10s} {'ms/event':>9s} {'CPU ms/event':>13s} {'ms/document (3 events)':>23s} "
          f"{'documents/s, one run':>21s}")
    for storage in args.storages.split(","):
        runs = [measure(storage, args.documents) for _ in range(args.runs)]
        ms = statistics.median(wall for wall, _ in runs) * 1000
        cpu_ms = statistics.median(cpu for _, cpu in runs) * 1000
        rows.append({"storage": storage, "ms_per_event": round(ms, 2),
                     "ms_per_event_runs": [round(wall * 1000, 2) for wall, _ in runs],
                     "cpu_ms_per_event": round(cpu_ms, 2),
                     "ms_per_document": round(3 * ms, 2), "documents_per_s_one_run": round(1000 / (3 * ms), 1)})
        print(f"{storage:10s} {ms:9.2f} {cpu_ms:13.2f} {3 * ms:23.2f} {1000 / (3 * ms):21.1f}")
    write_json(args.json, {"documents": args.documents, "runs": args.runs, "events_per_document": len(ASSETS),
                           "machine": "2 cores", "storages": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
