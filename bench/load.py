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
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.load_inbox import run_sensor
from bench.report import write_json
from bench.synthetic_corpus import (
    INDEX_VERSION,
    PG_MAINTENANCE_WORK_MEM,
    Corpus,
    K,
    chunk_index,
    documents,
    exact_top_k,
    ms,
    percentile,
    recall,
    start_postgres,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")



# ---- 2. store ---------------------------------------------------------------------------------


def run_store(backend: str, corpus: Corpus, per_doc: int, queries: np.ndarray, query_texts: list[str],
              truth: list[set[int]], workdir: Path, pg_url: str | None, ef_sweep: list[int],
              defer_hnsw: bool = True, live_docs: int = 4) -> dict:
    from contextual_assets.store import open_store

    store = open_store(pg_url if backend == "postgres" else None, workdir / f"{backend}.duckdb")
    try:
        store.corpus.register_index_version(INDEX_VERSION, {"bench": "load"})
        result = load_corpus(store, corpus, per_doc, deferred=backend == "postgres" and defer_hnsw)
        if backend == "postgres":
            result.update(postgres_plan(store, corpus))
        result.update(query_latency(store, queries, query_texts, truth, per_doc))
        if backend == "postgres":
            result["ef_search_default"] = getattr(store.backend, "ef_search", None)
            result["ef_sweep"] = ef_sweep_results(store, queries, truth, per_doc, ef_sweep)
        live = live_write(store, corpus, per_doc, live_docs)
        if live is not None:
            result["live_write"] = live
        return result
    finally:
        store.close()


def load_corpus(store, corpus: Corpus, per_doc: int, deferred: bool) -> dict:
    """Every document of the corpus written through `replace_document`, timed (building the chunk
    objects apart); `deferred`: the HNSW index built once after the load, timed too."""
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
    return result


def postgres_plan(store, corpus: Corpus) -> dict:
    """Postgres: ANALYZE's time, and whether the dense query's plan uses the HNSW index."""
    t0 = time.perf_counter()
    with store.backend._pool.connection() as conn:
        conn.execute("ANALYZE ctx_chunks")
    result = {"analyze_s": round(time.perf_counter() - t0, 2)}
    plan = "\n".join(r[0] for r in store.backend.query(
        f"EXPLAIN SELECT doc_id FROM ctx_chunks WHERE embedding_dim = {corpus.dim} AND index_version = ? "
        f"ORDER BY embedding::vector({corpus.dim}) <=> ?::vector({corpus.dim}) LIMIT 10",
        (INDEX_VERSION, "[" + ",".join(["0.05"] * corpus.dim) + "]")))
    result["dense_plan_uses_hnsw"] = f"ctx_chunks_hnsw_{corpus.dim}" in plan
    return result


def _timed(fn, items):
    """fn of each item, and the seconds each took."""
    out, times = [], []
    for item in items:
        t0 = time.perf_counter()
        out.append(fn(item))
        times.append(time.perf_counter() - t0)
    return out, times


def query_latency(store, queries: np.ndarray, query_texts: list[str], truth: list[set[int]], per_doc: int) -> dict:
    """The first dense and hybrid query's time, then p50/p95 of every query, and dense recall@10."""
    result: dict = {}
    t0 = time.perf_counter()
    store.search.dense(queries[0].tolist(), INDEX_VERSION, K)
    result["first_dense_query_s"] = round(time.perf_counter() - t0, 2)
    hits, times = _timed(lambda q: store.search.dense(q.tolist(), INDEX_VERSION, K), queries)
    result["dense"] = {"p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95)),
                       "recall_at_10": round(recall([[chunk_index(h, per_doc) for h in hs] for hs in hits],
                                                    truth, K), 4)}
    t0 = time.perf_counter()
    store.search.hybrid(query_texts[0], queries[0].tolist(), INDEX_VERSION, K)
    result["first_hybrid_query_s"] = round(time.perf_counter() - t0, 2)
    _, times = _timed(lambda i: store.search.hybrid(query_texts[i], queries[i].tolist(), INDEX_VERSION, K),
                      range(len(queries)))
    result["hybrid"] = {"p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95))}
    return result


def live_write(store, corpus: Corpus, per_doc: int, live_docs: int) -> dict | None:
    """Steady state: a few more documents written through replace_document into the full store
    (on Postgres with the HNSW index live), under another index version so searches above are unaffected."""
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
        return {"chunks": live_n, "s": round(live_s, 2), "chunks_per_s": round(live_n / live_s)}
    return None


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
