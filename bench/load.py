"""Load benchmark: the inbox sensor over many documents, and dense/hybrid search over a large store.

1. Inbox: `--docs` small text/markdown files (modified an hour ago, so settled) in a temporary inbox,
   a real temporary Dagster instance (sqlite storage) and the real `new_documents` sensor with its state
   in the DuckDB store. Timed: the first tick (every file new), the partitions it requests being added,
   ticks with nothing changed (median of 3; with the cursor's size and the entries each tick wrote), a
   tick with one file changed, and listing the `documents` partitions.
2. Store: `--chunks` synthetic chunks (`--dim` dimensions, like all-MiniLM-L6-v2) written through
   the store's own write path (`replace_document`, `--chunks-per-doc` chunks per document), on each
   back-end of `--backends` (DuckDB file; Postgres + pgvector HNSW from pgserver in a temp dir).
   Vectors are a two-level mixture of Gaussians (topics, sub-topics, points; unit-normalised), so
   true neighbours are meaningful; texts draw words from a topic vocabulary, for BM25. Timed:
   loading, dense and hybrid search p50/p95 over `--queries` queries; recall@10 of each store's
   dense search against exact (numpy brute-force) search, and on Postgres recall@10 and latency
   per `hnsw.ef_search` (`--ef-sweep`).

    python -m bench.load --json bench/out/load.json
    python -m bench.load --docs 10000 --chunks 200000 --backends duckdb,postgres --json OUT
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.report import write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

INDEX_VERSION = "iv-load-bench"
K = 10
PG_MAINTENANCE_WORK_MEM = "1GB"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# ---- 1. inbox sensor --------------------------------------------------------------------------


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
    from contextual_assets.store.shared import clear_store_cache
    from contextual_assets.ingest.inbox import open_inbox
    from contextual_assets.settings import PlatformSettings

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


# ---- 2. store ---------------------------------------------------------------------------------


class Corpus:
    """Two-level Gaussian mixture of unit vectors with topic-flavoured texts; reproducible by seed."""

    def __init__(self, n_chunks: int, dim: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        self.n, self.dim, self.rng = n_chunks, dim, rng
        self.n_topics = max(4, n_chunks // 1000)
        self.n_sub = 20
        self.topics = self._unit(rng.standard_normal((self.n_topics, dim)))
        self.subs = rng.standard_normal((self.n_topics, self.n_sub, dim)).astype(np.float32) * (0.7 / np.sqrt(dim))
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        self.vocab = ["".join(rng.choice(letters, size=rng.integers(4, 9))) for _ in range(3000 + 30 * self.n_topics)]
        self.general = self.vocab[:3000]
        self.labels = rng.integers(0, self.n_topics, n_chunks)
        self.sublabels = rng.integers(0, self.n_sub, n_chunks)
        self.vectors = self._sample(self.labels, self.sublabels)

    @staticmethod
    def _unit(m: np.ndarray) -> np.ndarray:
        m = m.astype(np.float32)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    def _sample(self, labels: np.ndarray, sublabels: np.ndarray) -> np.ndarray:
        noise = self.rng.standard_normal((len(labels), self.dim)).astype(np.float32) * (0.5 / np.sqrt(self.dim))
        return self._unit(self.topics[labels] + self.subs[labels, sublabels] + noise)

    def topic_words(self, topic: int) -> list[str]:
        return self.vocab[3000 + 30 * topic: 3000 + 30 * (topic + 1)]

    def text(self, i: int) -> str:
        rng = np.random.default_rng(i)
        words = list(rng.choice(self.general, 14)) + list(rng.choice(self.topic_words(int(self.labels[i])), 6))
        rng.shuffle(words)
        return " ".join(words)

    def queries(self, n: int) -> tuple[np.ndarray, list[str]]:
        labels = self.rng.integers(0, self.n_topics, n)
        vectors = self._sample(labels, self.rng.integers(0, self.n_sub, n))
        texts = [" ".join(self.rng.choice(self.topic_words(int(t)), 3)) for t in labels]
        return vectors, texts


def documents(corpus: Corpus, per_doc: int, version: str = INDEX_VERSION, limit: int | None = None):
    """The corpus as (document record, chunks) pairs of `per_doc` chunks, the first `limit` chunks only."""
    from contextual_assets.models import DocumentRecord, EmbeddedChunk, content_hash

    total = corpus.n if limit is None else min(limit, corpus.n)
    for start in range(0, total, per_doc):
        doc_id = f"bench/doc-{start // per_doc:05d}.md"
        chunks = []
        for ordinal, i in enumerate(range(start, min(start + per_doc, total))):
            text = corpus.text(i)
            chunks.append(EmbeddedChunk(
                doc_id=doc_id, source_doc=doc_id, title=f"Doc {start // per_doc}", ordinal=ordinal,
                section_path=[f"Topic {corpus.labels[i]}"], text=text, token_count=20, content_hash=content_hash(text),
                header="", header_source="none", embedding=corpus.vectors[i].tolist(),
            ))
        record = DocumentRecord(doc_id=doc_id, index_version=version, source_path=f"/bench/{doc_id}", kind="md",
                                title=f"Doc {start // per_doc}", file_hash=f"{start:064x}", n_chunks=len(chunks),
                                updated_at="")
        yield record, chunks


def exact_top_k(corpus: Corpus, queries: np.ndarray, k: int) -> list[set[int]]:
    scores = queries @ corpus.vectors.T
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return [set(int(i) for i in row) for row in top]


def recall(found: list[list[int]], truth: list[set[int]], k: int) -> float:
    return float(np.mean([len(set(f[:k]) & t) / k for f, t in zip(found, truth)]))


def chunk_index(hit, per_doc: int) -> int:
    return int(hit.doc_id.rsplit("-", 1)[1].split(".")[0]) * per_doc + hit.ordinal


def run_store(backend: str, corpus: Corpus, per_doc: int, queries: np.ndarray, query_texts: list[str],
              truth: list[set[int]], workdir: Path, pg_url: str | None, ef_sweep: list[int],
              defer_hnsw: bool = True, live_docs: int = 4) -> dict:
    from contextual_assets.store import open_store

    store = open_store(pg_url if backend == "postgres" else None, workdir / f"{backend}.duckdb")
    try:
        store.corpus.register_index_version(INDEX_VERSION, {"bench": "load"})
        deferred = backend == "postgres" and defer_hnsw
        if deferred:
            # Bulk path: rows still go through replace_document (COPY, one transaction per document),
            # but the HNSW index is built once after the load instead of maintained row by row.
            store.backend._indexed_dims.add(corpus.dim)
        load_s = build_s = 0.0
        t_build = time.perf_counter()
        for record, chunks in documents(corpus, per_doc):
            t0 = time.perf_counter()
            store.corpus.replace_document(record, chunks)
            load_s += time.perf_counter() - t0
        build_s = time.perf_counter() - t_build - load_s
        count = store.corpus.count_chunks(INDEX_VERSION)
        result: dict = {"chunks": count, "documents": len(store.corpus.documents(INDEX_VERSION)),
                        "load_s": round(load_s, 1), "load_chunks_per_s": round(count / load_s) if load_s else None,
                        "build_chunk_objects_s": round(build_s, 1),
                        "load_path": "replace_document, HNSW index built after" if deferred else "replace_document"}
        if deferred:
            store.backend._indexed_dims.discard(corpus.dim)
            t0 = time.perf_counter()
            store.backend._ensure_hnsw(corpus.dim)
            result["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        if backend == "postgres":
            t0 = time.perf_counter()
            with store.backend._pool.connection() as conn:
                conn.execute("ANALYZE ctx_chunks")
            result["analyze_s"] = round(time.perf_counter() - t0, 2)
            plan = "\n".join(r[0] for r in store.backend.query(
                f"EXPLAIN SELECT doc_id FROM ctx_chunks WHERE embedding_dim = {corpus.dim} AND index_version = ? "
                f"ORDER BY embedding::vector({corpus.dim}) <=> ?::vector({corpus.dim}) LIMIT 10",
                (INDEX_VERSION, "[" + ",".join(["0.05"] * corpus.dim) + "]")))
            result["dense_plan_uses_hnsw"] = f"ctx_chunks_hnsw_{corpus.dim}" in plan

        def timed(fn, items):
            out, times = [], []
            for item in items:
                t0 = time.perf_counter()
                out.append(fn(item))
                times.append(time.perf_counter() - t0)
            return out, times

        t0 = time.perf_counter()
        store.search.dense(queries[0].tolist(), INDEX_VERSION, K)
        result["first_dense_query_s"] = round(time.perf_counter() - t0, 2)
        hits, times = timed(lambda q: store.search.dense(q.tolist(), INDEX_VERSION, K), queries)
        result["dense"] = {"p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95)),
                           "recall_at_10": round(recall([[chunk_index(h, per_doc) for h in hs] for hs in hits],
                                                        truth, K), 4)}
        t0 = time.perf_counter()
        store.search.hybrid(query_texts[0], queries[0].tolist(), INDEX_VERSION, K)
        result["first_hybrid_query_s"] = round(time.perf_counter() - t0, 2)
        _, times = timed(lambda i: store.search.hybrid(query_texts[i], queries[i].tolist(), INDEX_VERSION, K),
                         range(len(queries)))
        result["hybrid"] = {"p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95))}
        if backend == "postgres":
            result["ef_search_default"] = getattr(store.backend, "ef_search", None)
            result["ef_sweep"] = ef_sweep_results(store, queries, truth, per_doc, ef_sweep)
        # Steady state: a few more documents written through replace_document into the full store
        # (on Postgres with the HNSW index live), under another index version so searches above are unaffected.
        store.corpus.register_index_version(INDEX_VERSION + "-live", {"bench": "load"})
        live_s, live_n = 0.0, 0
        for n, (record, chunks) in enumerate(documents(corpus, per_doc)):
            if n >= live_docs:
                break
            record = record.model_copy(update={"index_version": INDEX_VERSION + "-live"})
            t0 = time.perf_counter()
            store.corpus.replace_document(record, chunks)
            live_s += time.perf_counter() - t0
            live_n += len(chunks)
        if live_n:
            result["live_write"] = {"chunks": live_n, "s": round(live_s, 2), "chunks_per_s": round(live_n / live_s)}
        return result
    finally:
        store.close()


def ef_sweep_results(store, queries: np.ndarray, truth: list[set[int]], per_doc: int, values: list[int]) -> list[dict]:
    """Recall@10 and latency of the store's HNSW query at each `hnsw.ef_search`."""
    from contextual_assets.store.postgres_store import _vector_literal

    dim = queries.shape[1]
    sql = (f"SELECT doc_id, ordinal FROM ctx_chunks WHERE embedding_dim = {dim} AND index_version = %s "
           f"ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) LIMIT %s")
    out = []
    with store.backend._pool.connection() as conn:
        for ef in values:
            found, times = [], []
            for q in queries:
                literal = _vector_literal(q)
                t0 = time.perf_counter()
                with conn.transaction():
                    conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                    rows = conn.execute(sql, (INDEX_VERSION, literal, K)).fetchall()
                times.append(time.perf_counter() - t0)
                found.append([int(d.rsplit("-", 1)[1].split(".")[0]) * per_doc + int(o) for d, o in rows])
            out.append({"ef_search": ef, "recall_at_10": round(recall(found, truth, K), 4),
                        "p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95))})
    return out


def start_postgres(workdir: Path):
    import pgserver

    # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
    data_dir = Path(tempfile.mkdtemp(prefix="ctx-load-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    server.psql("DROP DATABASE IF EXISTS ctx_load_bench;")
    server.psql("CREATE DATABASE ctx_load_bench;")
    # Room for the HNSW graph while CREATE INDEX builds it (pgvector warns and slows down otherwise).
    server.psql(f"ALTER DATABASE ctx_load_bench SET maintenance_work_mem = '{PG_MAINTENANCE_WORK_MEM}';")
    url = server.get_uri().replace("/postgres?", "/ctx_load_bench?", 1)
    return server, data_dir, url


def run(n_docs: int, n_chunks: int, dim: int, n_queries: int, per_doc: int, backends: list[str], workdir: Path,
        ef_sweep: list[int], seed: int = 7, defer_hnsw: bool = True, pg_url: str | None = None) -> dict:
    result: dict = {"machine": {"cpus": os.cpu_count()},
                    "config": {"docs": n_docs, "chunks": n_chunks, "dim": dim, "queries": n_queries,
                               "chunks_per_doc": per_doc, "backends": backends, "k": K, "seed": seed,
                               "postgres_hnsw_during_load": not defer_hnsw}}
    if n_docs:
        result["sensor"] = run_sensor(n_docs, workdir / "sensor")
    if n_chunks:
        t0 = time.perf_counter()
        corpus = Corpus(n_chunks, dim, seed)
        queries, query_texts = corpus.queries(n_queries)
        truth = exact_top_k(corpus, queries, K)
        result["corpus"] = {"topics": corpus.n_topics, "subtopics_per_topic": corpus.n_sub,
                            "generate_s": round(time.perf_counter() - t0, 1)}
        result["stores"] = {}
        for backend in backends:
            server = data_dir = None
            url = pg_url
            if backend == "postgres" and not pg_url:
                server, data_dir, url = start_postgres(workdir)
            try:
                result["stores"][backend] = run_store(backend, corpus, per_doc, queries, query_texts, truth,
                                                      workdir, url, ef_sweep, defer_hnsw=defer_hnsw)
                if server is not None:
                    result["stores"][backend]["maintenance_work_mem"] = PG_MAINTENANCE_WORK_MEM
            finally:
                if server is not None:
                    server.cleanup()
                    shutil.rmtree(data_dir, ignore_errors=True)
    return result


def print_table(result: dict) -> None:
    sensor = result.get("sensor")
    if sensor:
        print(f"\ninbox sensor, {sensor['documents']} documents ({sensor['dagster_storage']}, store {sensor['store']}, "
              f"settle {sensor['settle_s']:g} s)")
        for name in ("first_tick", "unchanged_tick", "one_changed_tick"):
            t = sensor[name]
            print(f"  {name:18s} tick {t['tick_s']:8.3f} s  + add partitions {t['apply_partitions_s']:7.3f} s  "
                  f"run requests {t['run_requests']:6d}  partitions added {t['partitions_added']:6d}  "
                  f"entries written {t['entries_written']:6d}  cursor {t['cursor_bytes']} bytes")
        lp = sensor["list_partitions"]
        print(f"  list partitions ({lp['partitions']}): median {lp['median_s']:.4f} s over {lp['runs']} calls")
        up = sensor["unchanged_parts"]
        print(f"  an unchanged tick's parts: list the inbox {up['list_inbox_s']:.3f} s, read the state "
              f"({up['entries']} entries) {up['read_state_s']:.3f} s")
        print(f"  the same sources in one register_sources transaction: {sensor['register_sources_bulk_s']:.3f} s")
        u = sensor["unchanged_tick"]
        print("\n| scenario | files | tick s (median) | cursor bytes | entries written |")
        print("|---|---|---|---|---|")
        print(f"| unchanged tick, {sensor['store']} | {sensor['documents']} | {u['tick_s']:.3f} | {u['cursor_bytes']} | "
              f"{u['entries_written']} |")
    stores = result.get("stores")
    if stores:
        cfg = result["config"]
        print(f"\nstore, {cfg['chunks']} chunks x {cfg['dim']} dims, {cfg['queries']} queries, k={cfg['k']}")
        print(f"{'backend':9s} {'load s':>8s} {'chunks/s':>9s} {'dense p50':>10s} {'p95':>8s} {'recall@10':>10s} "
              f"{'hybrid p50':>11s} {'p95':>8s} {'1st dense':>10s} {'1st hybrid':>11s}")
        for name, s in stores.items():
            extra = "".join(f"  {k}={s[k]}" for k in ("load_path", "hnsw_build_s", "dense_plan_uses_hnsw") if k in s)
            live = s.get("live_write")
            print(f"  {name}:{extra}" + (f"  live write {live['chunks_per_s']} chunks/s" if live else ""))
            print(f"{name:9s} {s['load_s']:8.1f} {s['load_chunks_per_s'] or 0:9d} {s['dense']['p50_ms']:8.1f}ms "
                  f"{s['dense']['p95_ms']:6.1f}ms {s['dense']['recall_at_10']:10.3f} {s['hybrid']['p50_ms']:9.1f}ms "
                  f"{s['hybrid']['p95_ms']:6.1f}ms {s['first_dense_query_s']:9.2f}s {s['first_hybrid_query_s']:10.2f}s")
            for row in s.get("ef_sweep", []):
                print(f"    hnsw.ef_search={row['ef_search']:<5d} recall@10 {row['recall_at_10']:.3f}  "
                      f"p50 {row['p50_ms']:.1f} ms  p95 {row['p95_ms']:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=10_000, help="inbox documents (0: skip the sensor part)")
    parser.add_argument("--chunks", type=int, default=200_000, help="store chunks (0: skip the store part)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunks-per-doc", type=int, default=500)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--ef-sweep", default="40,64,100,200", help="hnsw.ef_search values to measure on Postgres")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pg-live-index", action="store_true",
                        help="keep the Postgres HNSW index live during the load (default: build it after)")
    parser.add_argument("--pg-url", default="", help="an empty Postgres database with pgvector to use "
                        "(default: start one with pgserver in a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep files here (default: a temp dir)")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"duckdb", "postgres"}
    if unknown:
        parser.error(f"unknown backends: {sorted(unknown)}")
    ef_sweep = [int(v) for v in args.ef_sweep.split(",") if v.strip()]
    with tempfile.TemporaryDirectory(prefix="ctx-load-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        result = run(args.docs, args.chunks, args.dim, args.queries, args.chunks_per_doc, backends, workdir,
                     ef_sweep, args.seed, defer_hnsw=not args.pg_live_index, pg_url=args.pg_url or None)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
