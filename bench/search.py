"""Search benchmark: start-up that does not grow with the corpus, the search service's latency under
closed and open-loop load, and the recall of what it serves.

Two index versions on each back-end, written through the store's own write path: `--chunks` chunks
and a 1,000-chunk version, both recording the bundled all-MiniLM-L6-v2 as their embedder, so
`ctx search` and `ctx serve` embed queries as they would for a real index. The corpus:

- `--real`: real text with real MiniLM vectors, grown by perturbed copies (bench/real_corpus.py says
  exactly how); queries are the codebase evaluation set's questions and spans of the texts.
- default: bench.load's synthetic Gaussian mixture (topic-word texts; no service recall: its query
  texts say nothing about its vectors).

Measured per back-end:
- `cold_cli_s` / `cold_cli_small_s`: wall time of one `ctx search` process (hybrid, k=10) against the
  big / small version, median of `--cold-runs`, alternating, same run;
- `service_p50_ms`, `service_p95_ms`, `qps`: `ctx serve` in its own process, `--clients` client threads
  sending hybrid k=10 searches back to back (closed loop) for `--duration` s; `service_1_client_*` the
  same with one client; `service_dense_*` in dense mode;
- `open_loop`: hybrid searches arriving as a Poisson process at offered rates (fractions of the
  closed-loop qps, `--open-rates`), each rate for `--open-duration` s; latency from the moment a
  request was due, so time spent waiting for a free client counts (no coordinated omission);
- `recall_at_10`: the store's own dense top-10 (DuckDB exact in SQL, Postgres HNSW) against exact
  numpy search over all vectors; on Postgres `hnsw_ef_sweep` gives it, with the store's dense top-10
  latency (one client, in-process), per `hnsw.ef_search` of EF_SWEEP;
- `service_recall_at_10` / `service_hybrid_recall_at_10` (`--real`): the service's dense and hybrid
  top-10 for query texts against exact search: exact dense, and the same fusion over exact dense
  candidates and the store's BM25 (exact on both back-ends).

The client threads share the machine's cores with the service: on a small machine they cost it qps.

    python -m bench.search --chunks 200000 --backends duckdb,postgres --real --json bench/results/search.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.report import write_json
from bench.search_load import Queries, closed_loop, open_loop
from bench.sim.deployment import free_port
from bench.synthetic_corpus import Corpus, K, documents, ms, percentile, start_postgres

BIG, SMALL = "iv-search-big", "iv-search-small"
EF_SWEEP = (40, 100, 200, 400, 800, 1000)
SMALL_CHUNKS = 1000
PER_DOC = 500


@dataclass
class Workload:
    """What the benchmark loads and asks: the corpus's vectors and documents, and its queries."""

    name: str
    vectors: np.ndarray  # (n, dim), unit rows, in chunk order
    documents: Callable[[str, int | None], Iterator[tuple]]
    keys: list[tuple[str, int]]  # chunk index -> (doc_id, ordinal)
    recall_texts: list[str]
    recall_vectors: np.ndarray
    load_texts: list[str]  # distinct texts for the load phases
    texts_match_vectors: bool  # whether a query text's embedding is its recall vector


def real_workload(n: int, n_queries: int, seed: int) -> Workload:
    from bench.real_corpus import RealCorpus, embed_cached

    corpus = RealCorpus(n, seed)
    texts = corpus.queries(n_queries + 20_000)
    return Workload("real", corpus.vectors, corpus.documents, corpus.keys, texts[:n_queries],
                    embed_cached(texts[:n_queries]), texts[n_queries:], True)


def synthetic_workload(n: int, n_queries: int, seed: int) -> Workload:
    corpus = Corpus(n, 384, seed)
    vectors, texts = corpus.queries(n_queries)
    _, load_texts = corpus.queries(20_000)
    keys = [(f"bench/doc-{i // PER_DOC:05d}.md", i % PER_DOC) for i in range(n)]
    return Workload("synthetic", corpus.vectors,
                    lambda version, limit=None: documents(corpus, PER_DOC, version=version, limit=limit),
                    keys, texts, vectors, load_texts, False)


def ctx_command(*args: str) -> list[str]:
    """`ctx` of the running interpreter's environment (not a hard-coded venv)."""
    return [sys.executable, "-m", "contextual_assets.cli.main", *args]


def load_store(backend: str, work: Workload, url: str | None, workdir: Path) -> dict:
    from contextual_assets.embedder_config import EmbedderCatalog
    from contextual_assets.store import open_store

    embedders = EmbedderCatalog()
    fingerprint = {"embedder": embedders.identity(), "bench": "search"}
    dim = work.vectors.shape[1]
    store = open_store(url, workdir / "index.duckdb")
    out: dict = {}
    try:
        if backend == "postgres":
            store.backend._indexed_dims.add(dim)  # bulk load: the HNSW index is built once, after (as bench.load)
        for version, limit in ((BIG, None), (SMALL, SMALL_CHUNKS)):
            store.corpus.register_index_version(version, fingerprint, {"embedder": embedders.recipe()})
            t0 = time.perf_counter()
            for record, chunks in work.documents(version, limit):
                store.corpus.replace_document(record, chunks)
            out[f"load_{'big' if version == BIG else 'small'}_s"] = round(time.perf_counter() - t0, 1)
        if backend == "postgres":
            store.backend._indexed_dims.discard(dim)
            t0 = time.perf_counter()
            store.backend._ensure_hnsw(dim)
            with store.backend._pool.connection() as conn:
                conn.execute("ANALYZE")
            out["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        out["chunks"] = store.corpus.count_chunks(BIG)
        out["documents"] = len(store.corpus.documents(BIG))
    finally:
        store.close()
    return out


def exact_dense(work: Workload, vectors: np.ndarray, n: int) -> list[list[tuple[str, int, float]]]:
    """The n nearest chunks of each query vector by brute force, as (doc_id, ordinal, cosine)."""
    out = []
    for start in range(0, len(vectors), 64):
        scores = vectors[start:start + 64] @ work.vectors.T
        top = np.argpartition(-scores, n - 1, axis=1)[:, :n]
        for row, idx in zip(scores, top):
            ranked = sorted(idx, key=lambda i: -row[i])
            out.append([(*work.keys[i], float(row[i])) for i in ranked])
    return out


def recall_of(found: list[list[tuple[str, int]]], truth: list[list[tuple[str, int, float]]]) -> float:
    return round(float(np.mean([len({(d, o) for d, o in f[:K]} & {(d, o) for d, o, _ in t[:K]}) / K
                                for f, t in zip(found, truth)])), 4)


def store_recall(work: Workload, url: str | None, workdir: Path) -> dict:
    """The store's dense top-10 against exact; and the exact hybrid top-10 the service is judged by."""
    from contextual_assets.fusion import FusionWeights, fuse
    from contextual_assets.store import open_store

    weights = FusionWeights()
    depth = max(K, weights.candidates)
    truth_dense = exact_dense(work, work.recall_vectors, depth)
    store = open_store(url, workdir / "index.duckdb")
    try:
        found = [[(d, o) for d, o, _ in store.search.dense_top(q.tolist(), BIG, K)] for q in work.recall_vectors]
        truth_hybrid = [fuse(dense, store.search.lexical_top(text, BIG, depth), K, weights)
                        for dense, text in zip(truth_dense, work.recall_texts)]
        sweep = ef_sweep(store, work, truth_dense) if url else None
    finally:
        store.close()
    out = {"recall_at_10": recall_of(found, truth_dense), "truth_dense": truth_dense, "truth_hybrid": truth_hybrid}
    if sweep:
        out["hnsw_ef_sweep"] = sweep
    return out


def ef_sweep(store, work: Workload, truth_dense: list) -> list[dict]:
    """Postgres: recall@10 and the store's dense top-10 latency (one client, in-process) per HNSW
    candidate list (hnsw.ef_search; pgvector's ceiling is 1000)."""
    default = store.backend.ef_search
    rows = []
    try:
        for ef in EF_SWEEP:
            store.backend.ef_search = ef
            found, times = [], []
            for q in work.recall_vectors:
                t0 = time.perf_counter()
                found.append([(d, o) for d, o, _ in store.search.dense_top(q.tolist(), BIG, K)])
                times.append(time.perf_counter() - t0)
            rows.append({"ef_search": ef, "recall_at_10": recall_of(found, truth_dense),
                         "p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95))})
    finally:
        store.backend.ef_search = default
    return rows


def cold_cli(env: dict, version: str, query: str) -> float:
    t0 = time.perf_counter()
    result = subprocess.run(ctx_command("search", query, "--version", version, "-k", str(K), "--json"), env=env,
                            capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - t0
    if result.returncode != 0:
        raise SystemExit(f"ctx search failed: {result.stderr[-2000:]}")
    return elapsed


def service_recall(base: str, work: Workload, truth: dict) -> dict:
    """The service's dense and hybrid top-10 for the recall queries' texts against exact search."""
    import httpx

    found: dict[str, list[list[tuple[str, int]]]] = {"dense": [], "hybrid": []}
    with httpx.Client(base_url=base, timeout=120) as http:
        for mode in found:
            for text in work.recall_texts:
                response = http.post("/v1/search", json={"query": text, "k": K, "mode": mode})
                response.raise_for_status()
                found[mode].append([(h["document"], h["ordinal"]) for h in response.json()["hits"]])
    return {"service_recall_at_10": recall_of(found["dense"], truth["truth_dense"]),
            "service_hybrid_recall_at_10": recall_of(found["hybrid"], truth["truth_hybrid"])}


def run_service(env: dict, work: Workload, truth: dict, args) -> dict:
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # Its log to a file: the access log of a long run would fill a pipe nobody reads, and stall it.
    log_path = Path(env["CTX_HOME"]) / "serve.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w")
    server = subprocess.Popen(ctx_command("serve", "--port", str(port)), env=env, stdout=log, stderr=subprocess.STDOUT)
    queries = Queries(work.load_texts)
    try:
        deadline = time.monotonic() + 600
        while True:
            if server.poll() is not None:
                raise SystemExit(f"ctx serve exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("ctx serve did not get ready")
            time.sleep(0.5)
        # Warm-up: the embedder loads on the first query; what the service holds in memory (postings; on
        # DuckDB also vectors and chunk rows) loads in the background, and is waited for.
        closed_loop(base, queries, 1, 3.0, "hybrid")
        parts = ("postings",) if env.get("DATABASE_URL") else ("postings", "vectors", "rows")
        wanted = [f'ctx_search_in_memory{{index_version="{BIG}",part="{part}"}} 1.0' for part in parts]
        while not all(line in httpx.get(f"{base}/metrics", timeout=10).text for line in wanted):
            if time.monotonic() > deadline:
                raise SystemExit(f"ctx serve did not load {parts} of {BIG} into memory")
            closed_loop(base, queries, 1, 1.0, "hybrid")
        closed_loop(base, queries, 2, 5.0, "hybrid")
        out: dict = {}
        if work.texts_match_vectors:
            out.update(service_recall(base, work, truth))
        out["hybrid"] = closed_loop(base, queries, args.clients, args.duration, "hybrid")
        out["hybrid_1_client"] = closed_loop(base, queries, 1, args.duration / 2, "hybrid")
        out["dense"] = closed_loop(base, queries, args.clients, args.duration / 2, "dense")
        capacity = out["hybrid"]["qps"]
        out["open_loop"] = [open_loop(base, queries, capacity * fraction, args.open_duration, seed=i)
                            for i, fraction in enumerate(args.open_rates)]
        return out
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def run_backend(backend: str, work: Workload, args, workdir: Path) -> dict:
    server = data_dir = None
    url = None
    if backend == "postgres":
        server, data_dir, url = start_postgres(workdir)
    try:
        row: dict = {"backend": backend}
        row.update(load_store(backend, work, url, workdir))
        truth = store_recall(work, url, workdir)
        row["recall_at_10"] = truth["recall_at_10"]
        if "hnsw_ef_sweep" in truth:
            row["hnsw_ef_sweep"] = truth["hnsw_ef_sweep"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_") and k != "DATABASE_URL"}
        env.update({"CTX_HOME": str(workdir / ".ctx"), "CTX_DUCKDB_PATH": str(workdir / "index.duckdb"),
                    "HF_HUB_OFFLINE": "1", "CTX_HEADER_SOURCE": "none", "DAGSTER_HOME": str(workdir / "dagster")})
        if url:
            env["DATABASE_URL"] = url
        texts = work.load_texts[-(args.cold_runs * 2 + 1):]
        big, small = [], []
        cold_cli(env, SMALL, texts[-1])  # page cache and bytecode warm for both sides alike
        for i in range(args.cold_runs):
            small.append(cold_cli(env, SMALL, texts[2 * i]))
            big.append(cold_cli(env, BIG, texts[2 * i + 1]))
        row.update({"cold_cli_s": round(statistics.median(big), 2),
                    "cold_cli_small_s": round(statistics.median(small), 2),
                    "cold_cli_runs": {"big": [round(v, 2) for v in big], "small": [round(v, 2) for v in small]}})
        row["cold_cli_ratio"] = round(row["cold_cli_s"] / row["cold_cli_small_s"], 3)

        from contextual_assets.store import open_store

        store = open_store(url, workdir / "index.duckdb")
        store.aliases.set("production", BIG, reason="bench.search")
        store.close()
        service = run_service(env, work, truth, args)
        hybrid, one, dense = service["hybrid"], service["hybrid_1_client"], service["dense"]
        row.update({"service_p50_ms": hybrid["p50_ms"], "service_p95_ms": hybrid["p95_ms"], "qps": hybrid["qps"],
                    "service_errors": hybrid["errors"],
                    "service_1_client_p50_ms": one["p50_ms"], "service_1_client_p95_ms": one["p95_ms"],
                    "service_1_client_qps": one["qps"],
                    "service_dense_p50_ms": dense["p50_ms"], "service_dense_p95_ms": dense["p95_ms"],
                    "service_dense_qps": dense["qps"],
                    "service_recall_at_10": service.get("service_recall_at_10"),
                    "service_hybrid_recall_at_10": service.get("service_hybrid_recall_at_10"),
                    "open_loop": service["open_loop"]})
        return row
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(data_dir, ignore_errors=True)


def fmt(value, spec: str) -> str:
    return format(value, spec) if value is not None else format("-", spec.rstrip("f").split(".")[0] + "s")


def print_table(result: dict) -> None:
    cfg = result["config"]
    print(f"\n{cfg['corpus']} corpus, {cfg['chunks']} chunks (and {SMALL_CHUNKS}); {cfg['clients']} clients x "
          f"{cfg['duration_s']} s; k={K}")
    print(f"{'backend':9s} {'cold CLI s':>10s} {'small s':>8s} {'p50 ms':>7s} {'p95 ms':>7s} {'qps':>6s} "
          f"{'1-client p95':>12s} {'dense p95':>9s} {'recall':>7s} {'svc dense':>9s} {'svc hybrid':>10s}")
    for r in result["rows"]:
        print(f"{r['backend']:9s} {r['cold_cli_s']:10.2f} {r['cold_cli_small_s']:8.2f} {r['service_p50_ms']:7.1f} "
              f"{r['service_p95_ms']:7.1f} {r['qps']:6.1f} {r['service_1_client_p95_ms']:12.1f} "
              f"{r['service_dense_p95_ms']:9.1f} {r['recall_at_10']:7.3f} {fmt(r['service_recall_at_10'], '9.3f')} "
              f"{fmt(r['service_hybrid_recall_at_10'], '10.3f')}")
    for r in result["rows"]:
        if r.get("hnsw_ef_sweep"):
            print(f"\n{r['backend']} HNSW: hnsw.ef_search / recall@10 / store dense top-10 p50, p95 ms (1 client)")
            for e in r["hnsw_ef_sweep"]:
                print(f"  {e['ef_search']:5d} {e['recall_at_10']:7.3f} {e['p50_ms']:8.1f} {e['p95_ms']:8.1f}")
    print("\nopen loop (hybrid; latency from each request's due time)")
    print(f"{'backend':9s} {'offered':>8s} {'achieved':>8s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s} "
          f"{'errors':>6s}")
    for r in result["rows"]:
        for o in r["open_loop"]:
            print(f"{r['backend']:9s} {o['offered_qps']:8.1f} {o['achieved_qps']:8.1f} {o['p50_ms']:8.1f} "
                  f"{o['p95_ms']:8.1f} {o['p99_ms']:8.1f} {o['errors']:6d}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--real", action="store_true", help="real text and MiniLM vectors (bench/real_corpus.py)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of closed-loop hybrid load "
                                                                     "(1 client and dense: half)")
    parser.add_argument("--open-rates", default="0.25,0.5,0.75,1.0,1.25",
                        help="open-loop offered rates, as fractions of the closed-loop qps")
    parser.add_argument("--open-duration", type=float, default=20.0, help="seconds per open-loop rate")
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200, help="queries for recall@10")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - {"duckdb", "postgres"}:
        parser.error(f"unknown backends: {sorted(set(backends) - {'duckdb', 'postgres'})}")
    try:
        args.open_rates = [float(x) for x in args.open_rates.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--open-rates: not a list of numbers: {args.open_rates}")
    t0 = time.perf_counter()
    work = (real_workload if args.real else synthetic_workload)(args.chunks, args.queries, args.seed)
    result = {"machine": {"cpus": os.cpu_count()},
              "config": {"corpus": work.name, "chunks": args.chunks, "small_chunks": SMALL_CHUNKS,
                         "clients": args.clients, "duration_s": args.duration, "open_rates": args.open_rates,
                         "open_duration_s": args.open_duration, "cold_runs": args.cold_runs,
                         "recall_queries": args.queries, "seed": args.seed},
              "corpus_generate_s": round(time.perf_counter() - t0, 1), "rows": []}
    with tempfile.TemporaryDirectory(prefix="ctx-search-") as tmp:
        for backend in backends:
            workdir = (args.workdir or Path(tmp)) / backend
            workdir.mkdir(parents=True, exist_ok=True)
            result["rows"].append(run_backend(backend, work, args, workdir))
            print(f"{backend}: {result['rows'][-1]}", flush=True)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
