"""Retrieval benchmark on a pre-chunked corpus (e.g. Anthropic's contextual-retrieval codebase set).

The corpus is ingested through the real Dagster assets into a fresh store, then the gold set is
run in dense, lexical and hybrid mode.

    python -m bench.retrieval --dataset ../shared/datasets/anthropic-codebase \
        --gold ../shared/datasets/anthropic-codebase/evaluation_set.dev.jsonl --headers none --json OUT
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.report import write_json

# Reference figures on the dev half with the same embedder (all-MiniLM-L6-v2), no headers.
REFERENCE = {
    "dense": (69.8, 74.6, 83.6),
    "lexical": (53.7, 65.4, 74.6),
    "hybrid": (74.2, 81.3, 85.7),
}


def ingest_corpus(dataset: Path, headers: str, workdir: Path, llm_base_urls: str = ""):
    """The corpus ingested through the assets into a store under `workdir` (reused when it already holds
    this version); returns (store, embedder, index version)."""
    import dagster as dg

    from contextual_assets.cli.ingest_runs import ingest_partitions, register_sources
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.index_version import current_index_version
    from contextual_assets.settings import PlatformSettings

    corpus = dataset / "codebase_chunks.json" if dataset.is_dir() else dataset
    settings = PlatformSettings.from_env().model_copy(update={
        "home": str(workdir), "duckdb_path": str(workdir / "bench.duckdb"), "database_url": "",
        "header_source": headers, "llm_base_urls": llm_base_urls or PlatformSettings.from_env().llm_base_urls,
    })
    resources = build_resources(settings)
    store = resources["store"].open()
    version = current_index_version(resources["headers"], resources["embedder"], resources["parsing"])
    if store.corpus.count_chunks(version) == 0:
        defs = build_definitions(settings)
        with dg.DagsterInstance.ephemeral() as instance:
            sources = [(corpus.name, corpus)]
            register_sources(store, instance, sources)
            outcomes = ingest_partitions(defs, instance, sources, log_level="ERROR")
        if not all(o.success for o in outcomes):
            raise SystemExit(f"ingest failed: {[o.error for o in outcomes if not o.success]}")
    return store, resources["embedder"].get(), version


def run(dataset: Path, gold_path: Path, headers: str, workdir: Path, llm_base_urls: str = "") -> dict:
    from eval_assets.evaluate import evaluate
    from eval_assets.gold.gold_set import load_gold

    corpus = dataset / "codebase_chunks.json" if dataset.is_dir() else dataset
    started = time.monotonic()
    store, embedder, version = ingest_corpus(dataset, headers, workdir, llm_base_urls)
    ingest_s = time.monotonic() - started
    gold = load_gold(gold_path)
    report = evaluate(store, embedder, gold, version)
    return {
        "dataset": str(corpus),
        "gold": str(gold_path),
        "headers": headers,
        "index_version": version,
        "chunks": store.corpus.count_chunks(version),
        "ingest_s": round(ingest_s, 2),
        "modes": {
            mode: {
                "pass_at_5": round(100 * m.pass_at_5, 2), "pass_at_10": round(100 * m.pass_at_10, 2),
                "pass_at_20": round(100 * m.pass_at_20, 2), "mrr": round(100 * m.mrr, 2),
                "ndcg_at_10": round(100 * m.ndcg_at_10, 2), "n_queries": m.n_queries,
            }
            for mode, m in report.metrics.items()
        },
        "reference": {mode: dict(zip(("pass_at_5", "pass_at_10", "pass_at_20"), ref)) for mode, ref in REFERENCE.items()},
    }


# Published figures (full 248 queries; Voyage embeddings, Claude 3 Haiku headers), from
# ../shared/datasets/README.md, printed beside ours for orientation (different embedder and query set).
PUBLISHED = (
    ("plain embeddings", "80.92", "87.15", "90.06"),
    ("contextual embeddings", "86.37", "92.81", "93.78"),
    ("contextual embeddings + contextual BM25", "86.43", "93.21", "94.99"),
    ("+ reranking (Pass@10 only)", "", "94.79", ""),
)


def print_table(result: dict) -> None:
    print(f"\nheaders={result['headers']}  index={result['index_version']}  chunks={result['chunks']}  "
          f"ingest {result['ingest_s']} s")
    print(f"{'mode':8s} {'Pass@5':>7s} {'Pass@10':>8s} {'Pass@20':>8s} {'MRR':>6s} {'nDCG@10':>8s}   reference P@5/10/20")
    for mode, m in result["modes"].items():
        ref = REFERENCE.get(mode)
        ref_text = "/".join(f"{v:.1f}" for v in ref) if ref else "-"
        print(f"{mode:8s} {m['pass_at_5']:7.1f} {m['pass_at_10']:8.1f} {m['pass_at_20']:8.1f} {m['mrr']:6.1f} "
              f"{m['ndcg_at_10']:8.1f}   {ref_text}")
    print("\npublished (248 queries, Voyage + Claude 3 Haiku headers)   Pass@5  Pass@10  Pass@20")
    for name, *values in PUBLISHED:
        print(f"  {name:56s} {values[0]:>6s} {values[1]:>8s} {values[2]:>8s}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None)
    parser.add_argument("--headers", choices=["none", "structural", "openai"], default="none")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the store here (default: a temp dir)")
    args = parser.parse_args(argv)
    gold = args.gold or (args.dataset / "evaluation_set.dev.jsonl")
    with tempfile.TemporaryDirectory(prefix="ctx-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        result = run(args.dataset, gold, args.headers, workdir)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
