"""Choose the hybrid fusion weights on a development gold set, and measure rerank.

The corpus is ingested through the assets (as bench.retrieval does), each query's dense and lexical
candidate lists are read once, and every weight pair of a small grid fuses them; the grid point whose worst
Pass@k (k = 5, 10, 20) is furthest above the better single list (then the best mean) becomes the
recommended `CTX_FUSION_WEIGHTS`. Repeated 2-fold cross-validation on the same gold set estimates how
that choice carries to unseen queries. Only the gold set
given here is used: pass the dev half, never the held-back queries.

    python -m bench.fusion --dataset ../shared/datasets/anthropic-codebase \
        --gold ../shared/datasets/anthropic-codebase/evaluation_set.dev.jsonl --headers structural \
        --json bench/results/fusion.json [--rerank-model-dir DIR | --rerank-url URL --rerank-model NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.report import write_json

DENSE_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
CONSTANTS = (5, 10, 20, 60)
CV_REPEATS = 10
CANDIDATES = 100
KS = (5, 10, 20)


def _metrics(rankings: list[list[list[int]]], n_gold: list[int]) -> dict[str, float]:
    from eval_assets.ranking_metrics import pass_at_k, reciprocal_rank

    out = {f"pass_at_{k}": round(100 * statistics.mean(pass_at_k(r, n, k) for r, n in zip(rankings, n_gold)), 2)
           for k in KS}
    out["mrr"] = round(100 * statistics.mean(reciprocal_rank(r) for r in rankings), 2)
    return out


def _margin(row: dict, singles: list[dict]) -> float:
    """How far a fused row is above the best single list at its worst k (negative: below at some k)."""
    return min(row[f"pass_at_{k}"] - max(s[f"pass_at_{k}"] for s in singles) for k in KS)


def _choose(rows: list[dict]) -> dict:
    """The rule: the largest worst-k margin over both single lists, then the best mean Pass@k."""
    singles = [r for r in rows if r["mode"] != "hybrid"]
    hybrids = [r for r in rows if r["mode"] == "hybrid"]
    return max(hybrids, key=lambda r: (_margin(r, singles), statistics.mean(r[f"pass_at_{k}"] for k in KS)))


def sweep(store, embedder, gold, version: str, reranker=None, rerank_candidates: int = 50) -> dict:
    from contextual_assets.fusion import FusionWeights

    tasks = list(gold.tasks)
    lists, texts = candidate_lists(store, embedder, tasks, version)
    n_gold = [len(t.evidence) for t in tasks]
    graded = [{key: task.satisfied_by(hit.text) for key, hit in texts.items()} for task in tasks]
    per_config = config_rankings(lists, graded)
    rows = _rows_for(per_config, n_gold, list(range(len(tasks))))
    best = _choose(rows)
    result = {"version": version, "queries": len(tasks), "candidates": CANDIDATES, "rows": rows,
              "chosen": {"dense": best["dense"], "lexical": 1.0, "constant": best["constant"]},
              "rule": "largest worst-k margin of Pass@5/10/20 over the best single list, then mean Pass@k"}
    # How deep each list must be for the chosen weights to rank as they do with every candidate.
    result["candidates_sweep"] = candidates_sweep(FusionWeights(**result["chosen"]), lists, graded, n_gold)
    # How well does choosing this way carry to queries it never saw? Repeated 2-fold cross-validation
    # on the same gold set: choose on one half, measure on the other.
    result["cross_validation"] = cross_validation(per_config, n_gold, len(tasks))
    if reranker is not None:
        weights = FusionWeights(**result["chosen"], candidates=CANDIDATES)
        result["rerank"] = rerank_figures(reranker, rerank_candidates, weights, tasks, lists, texts, graded, n_gold)
    return result


def candidate_lists(store, embedder, tasks: list, version: str) -> tuple[list[tuple[list, list]], dict]:
    """Each query's dense and lexical candidate lists (CANDIDATES deep), and every candidate's hit by
    (doc_id, ordinal)."""
    vectors = embedder.embed([t.query for t in tasks])
    lists, texts = [], {}
    for task, vector in zip(tasks, vectors):
        dense = store.search.dense_top(vector, version, CANDIDATES)
        lexical = store.search.lexical_top(task.query, version, CANDIDATES)
        for hit in store.search.hits(version, [*dense, *lexical]):
            texts[(hit.doc_id, hit.ordinal)] = hit
        lists.append((dense, lexical))
    return lists, texts


def _ranking(graded: list[dict], i: int, keys) -> list[list[int]]:
    """Query i's top max(KS) of a ranked candidate list, as the gold evidence each satisfies."""
    return [graded[i][(d, o)] for d, o, *_ in keys[: max(KS)]]


def config_rankings(lists: list[tuple[list, list]], graded: list[dict]) -> list[tuple]:
    """(weights, mode, each query's ranking) for each list alone and every point of the grid."""
    from contextual_assets.fusion import FusionWeights, fuse

    configs = [(None, "dense"), (None, "lexical")] + [
        (FusionWeights(dense=w, lexical=1.0, constant=c, candidates=CANDIDATES), "hybrid")
        for c in CONSTANTS for w in DENSE_WEIGHTS]
    per_config = []
    for weights, mode in configs:
        if mode == "dense":
            ranked = [_ranking(graded, i, d) for i, (d, _) in enumerate(lists)]
        elif mode == "lexical":
            ranked = [_ranking(graded, i, lx) for i, (_, lx) in enumerate(lists)]
        else:
            ranked = [_ranking(graded, i, fuse(d, lx, max(KS), weights)) for i, (d, lx) in enumerate(lists)]
        per_config.append((weights, mode, ranked))
    return per_config


def _rows_for(per_config: list[tuple], n_gold: list[int], indices: list[int]) -> list[dict]:
    """One row of metrics per configuration over the queries at `indices`."""
    out = []
    for weights, mode, ranked in per_config:
        row = {"mode": mode, **_metrics([ranked[i] for i in indices], [n_gold[i] for i in indices])}
        if weights is not None:
            row.update({"dense": weights.dense, "lexical": weights.lexical, "constant": weights.constant})
        out.append(row)
    return out


def candidates_sweep(chosen, lists: list[tuple[list, list]], graded: list[dict], n_gold: list[int]) -> list[dict]:
    """The chosen weights' metrics with each list cut to a depth."""
    from contextual_assets.fusion import fuse

    out = []
    for depth in (20, 30, 40, 50, CANDIDATES):
        weights = chosen.model_copy(update={"candidates": depth})
        ranked = [_ranking(graded, i, fuse(d[:depth], lx[:depth], max(KS), weights)) for i, (d, lx) in enumerate(lists)]
        out.append({"candidates": depth, **_metrics(ranked, n_gold)})
    return out


def cross_validation(per_config: list[tuple], n_gold: list[int], queries: int) -> dict:
    """Repeated 2-fold cross-validation: the rule chooses on one half, each fold measured on the other
    (beside lexical alone and equal weights), mean Pass@k over the folds."""
    import random

    rng = random.Random(0)
    folds = {"chosen_on_other_half": [], "lexical": [], "equal_weights": []}
    for _ in range(CV_REPEATS):
        order = list(range(queries))
        rng.shuffle(order)
        half = len(order) // 2
        for pick, held in ((order[:half], order[half:]), (order[half:], order[:half])):
            chosen = _choose(_rows_for(per_config, n_gold, pick))
            held_rows = _rows_for(per_config, n_gold, held)
            picked = (chosen["dense"], chosen["constant"])
            folds["chosen_on_other_half"].append(next(r for r in held_rows if r["mode"] == "hybrid"
                                                      and (r["dense"], r["constant"]) == picked))
            folds["lexical"].append(next(r for r in held_rows if r["mode"] == "lexical"))
            folds["equal_weights"].append(next(r for r in held_rows if r["mode"] == "hybrid" and r["dense"] == 1.0
                                               and r["constant"] == 60))
    return {
        "repeats": CV_REPEATS, "folds": 2,
        **{name: {f"pass_at_{k}": round(statistics.mean(r[f"pass_at_{k}"] for r in rs), 2) for k in KS}
           for name, rs in folds.items()}}


def rerank_figures(reranker, rerank_candidates: int, weights, tasks: list, lists: list[tuple[list, list]],
                   texts: dict, graded: list[dict], n_gold: list[int]) -> dict:
    """The fused top `rerank_candidates` of each query reranked: metrics without and with, and the
    reranker's median seconds per query."""
    from contextual_assets.fusion import fuse

    plain, reranked, seconds = [], [], []
    for i, (task, (d, lx)) in enumerate(zip(tasks, lists)):
        fused = fuse(d, lx, max(rerank_candidates, max(KS)), weights)
        hits = [texts[(doc, o)] for doc, o, _ in fused]
        plain.append(_ranking(graded, i, fused))
        started = time.perf_counter()
        top = reranker.rerank(task.query, hits[:rerank_candidates], max(KS))
        seconds.append(time.perf_counter() - started)
        reranked.append([graded[i][(h.doc_id, h.ordinal)] for h in top])
    return {"reranker": reranker.identity, "candidates": rerank_candidates,
            "without": _metrics(plain, n_gold), "with": _metrics(reranked, n_gold),
            "seconds_per_query_p50": round(statistics.median(seconds), 3)}


def print_table(result: dict) -> None:
    print(f"\n{result['queries']} queries, {result['candidates']} candidates per list, version {result['version']}")
    print(f"{'mode':8s} {'dense w':>7s} {'c':>3s} {'Pass@5':>7s} {'Pass@10':>8s} {'Pass@20':>8s} {'MRR':>6s}")
    for r in result["rows"]:
        w = f"{r['dense']:.1f}" if "dense" in r else "-"
        c = str(r.get("constant", "-"))
        print(f"{r['mode']:8s} {w:>7s} {c:>3s} {r['pass_at_5']:7.1f} {r['pass_at_10']:8.1f} {r['pass_at_20']:8.1f} "
              f"{r['mrr']:6.1f}")
    print(f"chosen: {result['chosen']} ({result['rule']})")
    print("\ncandidates per list for the chosen weights:")
    for row in result["candidates_sweep"]:
        print(f"  {row['candidates']:4d} {row['pass_at_5']:7.1f} {row['pass_at_10']:8.1f} {row['pass_at_20']:8.1f}")
    cv = result["cross_validation"]
    print(f"\n{cv['repeats']}x{cv['folds']}-fold cross-validation (choose on one half, measure on the other):")
    for name in ("lexical", "equal_weights", "chosen_on_other_half"):
        m = cv[name]
        print(f"  {name:22s} {m['pass_at_5']:7.1f} {m['pass_at_10']:8.1f} {m['pass_at_20']:8.1f}")
    if "rerank" in result:
        rr = result["rerank"]
        print(f"\nrerank {rr['reranker']} over the top {rr['candidates']} fused "
              f"({rr['seconds_per_query_p50']} s per query, median)")
        for name in ("without", "with"):
            m = rr[name]
            print(f"  {name:8s} {m['pass_at_5']:7.1f} {m['pass_at_10']:8.1f} {m['pass_at_20']:8.1f} {m['mrr']:6.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None, help="development gold set (default: the dev half)")
    parser.add_argument("--headers", choices=["none", "structural", "openai"], default="structural")
    parser.add_argument("--workdir", type=Path, default=None, help="reuse/keep the store here (default: temp dir)")
    parser.add_argument("--rerank-model-dir", default="", help="a local cross-encoder directory")
    parser.add_argument("--rerank-url", default="", help="an OpenAI-compatible base URL serving /rerank")
    parser.add_argument("--rerank-model", default="", help="the reranker's model name at --rerank-url")
    parser.add_argument("--rerank-candidates", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from bench.retrieval import ingest_corpus
    from contextual_assets.rerank import configured_reranker
    from eval_assets.gold.gold_set import load_gold

    gold = load_gold(args.gold or (args.dataset / "evaluation_set.dev.jsonl"))
    reranker = configured_reranker(args.rerank_url, args.rerank_model, args.rerank_model_dir, "")
    with tempfile.TemporaryDirectory(prefix="ctx-fusion-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        store, embedder, version = ingest_corpus(args.dataset, args.headers, workdir)
        result = sweep(store, embedder, gold, version, reranker, args.rerank_candidates)
    result.update({"dataset": str(args.dataset), "gold": str(args.gold), "headers": args.headers})
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
