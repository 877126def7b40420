"""Two published behaviours of header generation on a vLLM-like fleet (the simulator in
bench/sim/fleet.py), measured side by side:

1. **Prefix windows.** Grouping W neighbouring chunks behind one byte-identical shared prefix (their
   joint surrounding context) raises the prefix-cache hit rate with W, and makes wall time worse:
   with ~1,000-token prompts and ~50-token answers decode dominates, and every output token reads
   the whole (now much longer) KV cache. The product therefore never manufactures shared prefixes.
   Measured on one replica, restarted cold for each W.
2. **Document loop.** Headers for one document, then its embedding and commit, then the next
   document: the whole fleet idles at every document boundary, visible in the per-second
   prompt-token timeline sampled from /metrics. Submitting every document's chunks to the shared
   pool at once keeps it busy.

    python -m bench.prefix_window --json bench/out/prefix_window.json
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from bench.report import write_json
from bench.sim import FleetSimulator, ReplicaSpec
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.discovery import ModelDiscovery
from contextual_assets.fleet.metrics_timeline import MetricsSampler
from contextual_assets.fleet.pool import FleetRequest, HeaderFleet
from contextual_assets.headers.prompt import load_prompt

WINDOWS = (1, 2, 4, 8, 16)


def synthetic_section(n_chunks: int, chunk_words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocabulary = [f"term{i}" for i in range(5000)]
    return [" ".join(rng.choice(vocabulary) for _ in range(chunk_words)) for _ in range(n_chunks)]


def window_requests(chunks: list[str], window: int, context_words: int) -> list[FleetRequest]:
    """W=1: each chunk with ~context_words of surroundings (~1,000-token prompts). W>1: the W chunks of
    a window share one prefix holding all of them and their joint surroundings; only the last line
    (which chunk to header) differs."""
    prompt = load_prompt()
    requests = []
    half = context_words // 2
    words = [c.split() for c in chunks]
    flat = [w for chunk in words for w in chunk]
    starts = [sum(len(c) for c in words[:i]) for i in range(len(words))]
    for first in range(0, len(chunks), window):
        members = list(range(first, min(first + window, len(chunks))))
        begin = max(0, starts[members[0]] - half)
        end = min(len(flat), starts[members[-1]] + len(words[members[-1]]) + half)
        shared = " ".join(flat[begin:end])
        for index in members:
            messages = prompt.render(title="Operations manual", section_path="Maintenance", context=shared,
                                     chunk=f"(passage {index - first + 1} of {len(members)} in the document above)")
            estimate = sum(len(m["content"].split()) + 1 for m in messages)
            requests.append(FleetRequest(messages=messages, est_prompt_tokens=estimate, max_tokens=60,
                                         label=f"chunk {index}"))
    return requests


def run_windows(n_chunks: int, chunk_words: int, context_words: int, time_scale: float,
                cost_model: str = "vllm") -> list[dict]:
    chunks = synthetic_section(n_chunks, chunk_words, seed=1)
    rows = []
    for window in WINDOWS:
        requests = window_requests(chunks, window, context_words)
        with FleetSimulator([ReplicaSpec(cost_model=cost_model)], time_scale=time_scale) as sim:  # cold cache per W
            fleet = HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=sim.base_urls[0], max_in_flight=16)]),
                                discovery=ModelDiscovery())
            try:
                started = time.monotonic()
                results = fleet.run(requests)
                wall = time.monotonic() - started
            finally:
                fleet.close()
            stats = sim.stats()[0]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise SystemExit(f"W={window}: {len(failed)} requests failed: {failed[0]}")
        queries = stats["prefix_query_tokens"] or 1
        rows.append({
            "window": window,
            "prefix_cache_hit_rate": round(stats["prefix_hit_tokens"] / queries, 4),
            "wall_s": round(wall, 3),
            "simulated_busy_s": round(stats["busy_s"], 3),
            "mean_prompt_tokens": round(stats["prompt_tokens"] / len(requests), 1),
            "requests": len(requests),
        })
    return rows


def idle_gaps(timeline: list[dict]) -> list[int]:
    """Seconds (inside the run) in which no prompt token was processed and nothing was running."""
    busy = [i for i, row in enumerate(timeline) if row["prompt_tokens"] > 0 or row["running"] > 0]
    if not busy:
        return []
    return [row["t"] for row in timeline[busy[0] : busy[-1] + 1] if row["prompt_tokens"] == 0 and row["running"] == 0]


def run_document_loop(n_docs: int, chunks_per_doc: int, time_scale: float, embed_s_per_chunk: float) -> dict:
    """Headers document by document with an embed+commit barrier between, against the same work
    submitted to the shared pool at once (embedding overlapped)."""
    docs = [synthetic_section(chunks_per_doc, 60, seed=10 + d) for d in range(n_docs)]
    requests = [window_requests(doc, 1, 900) for doc in docs]
    out = {}
    for mode in ("document_loop", "shared_pool"):
        speeds = [1.0, 1.0, 0.775, 0.775]
        with FleetSimulator([ReplicaSpec(speed=s) for s in speeds], time_scale=time_scale) as sim:
            fleet = HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=16)
                                                      for u in sim.base_urls]), discovery=ModelDiscovery())
            try:
                with MetricsSampler(sim.base_urls, interval_s=0.1) as sampler:
                    started = time.monotonic()
                    if mode == "document_loop":
                        for doc_requests in requests:
                            results = fleet.run(doc_requests)
                            # The embed + commit barrier: CPU work during which no header is requested.
                            time.sleep(embed_s_per_chunk * len(results))
                    else:
                        futures = [fleet.submit(r) for doc_requests in requests for r in doc_requests]
                        for doc_index in range(n_docs):
                            mine = futures[doc_index * chunks_per_doc : (doc_index + 1) * chunks_per_doc]
                            for future in mine:
                                future.result()
                        # Embedding overlaps with headers of other documents; only the last one is exposed.
                        time.sleep(embed_s_per_chunk * chunks_per_doc)
                    wall = time.monotonic() - started
                    time.sleep(0.3)
            finally:
                fleet.close()
        timeline = sampler.timeline.per_second()
        gaps = idle_gaps(timeline)
        out[mode] = {"wall_s": round(wall, 3), "idle_seconds": gaps, "idle_s": len(gaps),
                     "timeline": [{"t": r["t"], "prompt_tokens": r["prompt_tokens"], "running": r["running"]}
                                  for r in timeline]}
    out["documents"] = n_docs
    out["chunks_per_document"] = chunks_per_doc
    out["embed_s_per_chunk"] = embed_s_per_chunk
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--chunks", type=int, default=64, help="chunks in the window sweep")
    parser.add_argument("--chunk-words", type=int, default=600)
    parser.add_argument("--context-words", type=int, default=400)
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--chunks-per-doc", type=int, default=96)
    parser.add_argument("--embed-s-per-chunk", type=float, default=0.03,
                        help="embed+commit barrier per chunk (MiniLM on 2 CPU cores: ~0.04 s)")
    args = parser.parse_args(argv)
    rows = run_windows(args.chunks, args.chunk_words, args.context_words, args.time_scale)
    print(f"{'W':>3s} {'hit rate':>9s} {'wall s':>8s} {'sim busy s':>11s} {'prompt tok':>11s}")
    for row in rows:
        print(f"{row['window']:3d} {row['prefix_cache_hit_rate']:9.3f} {row['wall_s']:8.2f} "
              f"{row['simulated_busy_s']:11.2f} {row['mean_prompt_tokens']:11.0f}")
    loop = run_document_loop(args.docs, args.chunks_per_doc, max(args.time_scale, 0.5), args.embed_s_per_chunk)
    for mode in ("document_loop", "shared_pool"):
        print(f"{mode:14s} wall {loop[mode]['wall_s']:6.2f} s, fleet idle {loop[mode]['idle_s']} s "
              f"(seconds {loop[mode]['idle_seconds']})")
    result = {"rows": rows, "document_loop": loop, "time_scale": args.time_scale,
              "chunk_words": args.chunk_words, "context_words": args.context_words}
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
