"""Search benchmark: start-up that does not grow with the corpus, and the search service under load.

Two index versions on each back-end, written through the store's own write path: `--chunks`
synthetic chunks (bench.load's Gaussian-mixture corpus: 384-dim unit vectors, topic-word texts,
500 chunks a document) and a 1,000-chunk version. Both record the bundled all-MiniLM-L6-v2 as their
embedder, so `ctx search` and `ctx serve` embed queries as they would for a real index. Measured:

- `cold_cli_s` / `cold_cli_small_s`: wall time of one `ctx search` process (hybrid, k=10) against the
  big / small version, median of `--cold-runs`, alternating, same run;
- `service_p50_ms`, `service_p95_ms`, `qps`: `ctx serve` in its own process, `--clients` client threads
  sending hybrid k=10 searches with distinct queries for `--duration` seconds, after a warm-up;
  `service_dense_*` the same in dense mode;
- `recall_at_10`: the store's dense top-10 (the path the service uses) against exact numpy search, over
  `--queries` in-distribution query vectors.

    python -m bench.search --chunks 200000 --backends duckdb,postgres --json bench/results/search.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.load import (
    Corpus,
    K,
    documents,
    exact_top_k,
    ms,
    percentile,
    recall,
    start_postgres,
)
from bench.report import write_json

BIG, SMALL = "iv-search-big", "iv-search-small"
SMALL_CHUNKS = 1000
PER_DOC = 500


def ctx_command(*args: str) -> list[str]:
    """`ctx` of the running interpreter's environment (not a hard-coded venv)."""
    return [sys.executable, "-m", "contextual_assets.app.cli", *args]


def load_store(backend: str, corpus: Corpus, url: str | None, workdir: Path) -> dict:
    from contextual_assets.embedding import EmbedderCatalog
    from contextual_assets.store import open_store

    embedders = EmbedderCatalog()
    fingerprint = {"embedder": embedders.identity(), "bench": "search"}
    store = open_store(url, workdir / "index.duckdb")
    out: dict = {}
    try:
        if backend == "postgres":
            store.backend._indexed_dims.add(corpus.dim)  # bulk load: the HNSW index is built once, after (as bench.load)
        for version, limit in ((BIG, None), (SMALL, SMALL_CHUNKS)):
            store.corpus.register_index_version(version, fingerprint, {"embedder": embedders.recipe()})
            t0 = time.perf_counter()
            for record, chunks in documents(corpus, PER_DOC, version=version, limit=limit):
                store.corpus.replace_document(record, chunks)
            out[f"load_{'big' if version == BIG else 'small'}_s"] = round(time.perf_counter() - t0, 1)
        if backend == "postgres":
            store.backend._indexed_dims.discard(corpus.dim)
            t0 = time.perf_counter()
            store.backend._ensure_hnsw(corpus.dim)
            with store.backend._pool.connection() as conn:
                conn.execute("ANALYZE")
            out["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        out["chunks"] = store.corpus.count_chunks(BIG)
    finally:
        store.close()
    return out


def dense_recall(corpus: Corpus, url: str | None, workdir: Path, n_queries: int) -> float:
    from contextual_assets.store import open_store

    queries, _ = corpus.queries(n_queries)
    truth = exact_top_k(corpus, queries, K)
    store = open_store(url, workdir / "index.duckdb")
    try:
        found = [[int(d.rsplit("-", 1)[1].split(".")[0]) * PER_DOC + o
                  for d, o, _ in store.search.dense_top(q.tolist(), BIG, K)] for q in queries]
    finally:
        store.close()
    return round(recall(found, truth, K), 4)


def cold_cli(env: dict, version: str, query: str) -> float:
    t0 = time.perf_counter()
    result = subprocess.run(ctx_command("search", query, "--version", version, "-k", str(K), "--json"), env=env,
                            capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - t0
    if result.returncode != 0:
        raise SystemExit(f"ctx search failed: {result.stderr[-2000:]}")
    return elapsed


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_service(base: str, queries: list[str], clients: int, duration_s: float, mode: str) -> dict:
    """`clients` threads, each sending searches back to back for `duration_s`; latency of each."""
    import httpx

    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s
    counter = iter(range(10**9))

    def client() -> None:
        with httpx.Client(base_url=base, timeout=60) as http:
            while time.perf_counter() < stop_at:
                with lock:
                    query = queries[next(counter) % len(queries)]
                t0 = time.perf_counter()
                response = http.post("/search", json={"query": query, "k": K, "mode": mode})
                elapsed = time.perf_counter() - t0
                with lock:
                    if response.status_code == 200:
                        latencies.append(elapsed)
                    else:
                        errors[0] += 1
    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return {"requests": len(latencies), "errors": errors[0], "p50_ms": ms(percentile(latencies, 50)),
            "p95_ms": ms(percentile(latencies, 95)), "qps": round(len(latencies) / wall, 1)}


def run_service(env: dict, queries: list[str], clients: int, duration_s: float) -> dict:
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(ctx_command("serve", "--port", str(port)), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                raise SystemExit(f"ctx serve exited: {server.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("ctx serve did not start")
            time.sleep(0.5)
        # Warm-up: the embedder loads on the first query; DuckDB's in-memory vectors load in the background.
        load_service(base, queries[-50:], 1, 3.0, "hybrid")
        time.sleep(5.0)
        load_service(base, queries[-50:], 2, 5.0, "hybrid")
        hybrid = load_service(base, queries, clients, duration_s, "hybrid")
        dense = load_service(base, queries[::-1], clients, duration_s / 2, "dense")
        return {"hybrid": hybrid, "dense": dense}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def run_backend(backend: str, corpus: Corpus, args, workdir: Path) -> dict:
    server = data_dir = None
    url = None
    if backend == "postgres":
        server, data_dir, url = start_postgres(workdir)
    try:
        row: dict = {"backend": backend}
        row.update(load_store(backend, corpus, url, workdir))
        row["recall_at_10"] = dense_recall(corpus, url, workdir, args.queries)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_") and k != "DATABASE_URL"}
        env.update({"CTX_HOME": str(workdir / ".ctx"), "CTX_DUCKDB_PATH": str(workdir / "index.duckdb"),
                    "HF_HUB_OFFLINE": "1", "CTX_HEADER_SOURCE": "none", "DAGSTER_HOME": str(workdir / "dagster")})
        if url:
            env["DATABASE_URL"] = url
        _, texts = corpus.queries(args.cold_runs * 2 + 1)
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
        _, service_queries = corpus.queries(20_000)
        service = run_service(env, service_queries, args.clients, args.duration)
        row.update({"service_p50_ms": service["hybrid"]["p50_ms"], "service_p95_ms": service["hybrid"]["p95_ms"],
                    "qps": service["hybrid"]["qps"], "service_errors": service["hybrid"]["errors"],
                    "service_dense_p50_ms": service["dense"]["p50_ms"],
                    "service_dense_p95_ms": service["dense"]["p95_ms"], "service_dense_qps": service["dense"]["qps"]})
        return row
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(data_dir, ignore_errors=True)


def print_table(result: dict) -> None:
    cfg = result["config"]
    print(f"\n{cfg['chunks']} chunks (and {SMALL_CHUNKS}); {cfg['clients']} clients x {cfg['duration_s']} s; k={K}")
    print(f"{'backend':9s} {'cold CLI s':>10s} {'small s':>8s} {'ratio':>6s} {'p50 ms':>7s} {'p95 ms':>7s} {'qps':>6s} "
          f"{'dense p50':>9s} {'p95':>6s} {'recall@10':>9s}")
    for r in result["rows"]:
        print(f"{r['backend']:9s} {r['cold_cli_s']:10.2f} {r['cold_cli_small_s']:8.2f} {r['cold_cli_ratio']:6.2f} "
              f"{r['service_p50_ms']:7.1f} {r['service_p95_ms']:7.1f} {r['qps']:6.1f} {r['service_dense_p50_ms']:9.1f} "
              f"{r['service_dense_p95_ms']:6.1f} {r['recall_at_10']:9.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of hybrid load (dense: half)")
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200, help="query vectors for recall@10")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - {"duckdb", "postgres"}:
        parser.error(f"unknown backends: {sorted(set(backends) - {'duckdb', 'postgres'})}")
    t0 = time.perf_counter()
    corpus = Corpus(args.chunks, 384, args.seed)
    result = {"machine": {"cpus": os.cpu_count()},
              "config": {"chunks": args.chunks, "small_chunks": SMALL_CHUNKS, "clients": args.clients,
                         "duration_s": args.duration, "cold_runs": args.cold_runs, "seed": args.seed},
              "corpus_generate_s": round(time.perf_counter() - t0, 1), "rows": []}
    with tempfile.TemporaryDirectory(prefix="ctx-search-") as tmp:
        for backend in backends:
            workdir = (args.workdir or Path(tmp)) / backend
            workdir.mkdir(parents=True, exist_ok=True)
            result["rows"].append(run_backend(backend, corpus, args, workdir))
            print(f"{backend}: {result['rows'][-1]}", flush=True)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
