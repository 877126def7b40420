"""Postgres full-text search against the store's BM25 on the same chunks and queries.

The issue that introduced the persistent lexical index asked to weigh Postgres FTS (a GIN index,
`ts_rank` / `ts_rank_cd`) against BM25. Both read the same tokens here (the store's identifier-aware
tokenizer, joined into a 'simple' tsvector), so only the ranking function differs.

    python -m bench.lexical_fts --headers structural --json bench/results/lexical_fts.json
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.report import write_json

KS = (5, 10, 20)
RANKINGS = {
    "ts_rank": "ts_rank(tsv, q)",
    "ts_rank, length-normalized (1)": "ts_rank(tsv, q, 1)",
    "ts_rank_cd": "ts_rank_cd(tsv, q)",
    "ts_rank_cd, length-normalized (1)": "ts_rank_cd(tsv, q, 1)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None)
    parser.add_argument("--headers", choices=["none", "structural"], default="structural")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import pgserver
    import psycopg  # noqa: F401 - missing, it fails here, before the corpus is ingested

    from bench.retrieval import ingest_corpus
    from eval_assets.gold.gold_set import load_gold

    gold = load_gold(args.gold or (args.dataset / "evaluation_set.dev.jsonl"))
    with tempfile.TemporaryDirectory(prefix="ctx-fts-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        store, _, version = ingest_corpus(args.dataset, args.headers, workdir)
        chunks = store.corpus.chunks(version)
        data_dir = Path(tempfile.mkdtemp(prefix="ctx-fts-pg-"))
        server = pgserver.get_server(data_dir, cleanup_mode="stop")
        try:
            rows = compare_rankings(server.get_uri(), store, version, chunks, gold)
        finally:
            server.cleanup()
            shutil.rmtree(data_dir, ignore_errors=True)
    result = {"headers": args.headers, "queries": len(gold.tasks), "chunks": len(chunks), "rows": rows}
    print(f"\n{len(gold.tasks)} queries, {len(chunks)} chunks, headers={args.headers}")
    for r in rows:
        print(f"  {r['ranking']:36s} {r['pass_at_5']:6.1f} {r['pass_at_10']:7.1f} {r['pass_at_20']:7.1f}")
    write_json(args.json, result)
    return 0


def compare_rankings(database_url: str, store, version: str, chunks: list, gold) -> list[dict]:
    """Pass@k of the store's BM25 and of each Postgres ranking in RANKINGS, over the same chunks (a GIN
    index on their tokens) and the gold set's queries."""
    import psycopg

    from contextual_assets.store.lexical import lexical_text, tokenize

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS fts; CREATE TABLE fts (i INTEGER PRIMARY KEY, tsv TSVECTOR)")
        with conn.cursor().copy("COPY fts (i, tsv) FROM STDIN") as copy:
            for i, c in enumerate(chunks):
                tokens = tokenize(lexical_text(c.title, c.section_path, c.header, c.text))
                copy.write_row((i, " ".join(t.replace("'", "") for t in tokens)))
        conn.execute("UPDATE fts SET tsv = to_tsvector('simple', tsv::text)")
        conn.execute("CREATE INDEX ON fts USING gin (tsv)")
        return [ranking_row(conn, store, version, chunks, gold, name, expression)
                for name, expression in [("BM25 (the store)", None), *RANKINGS.items()]]


def ranking_row(conn, store, version: str, chunks: list, gold, name: str, expression: str | None) -> dict:
    """One ranking's Pass@k over the gold set: the store's BM25 (`expression` None) or a Postgres
    ranking expression over the fts table."""
    from contextual_assets.store.lexical import tokenize
    from eval_assets.ranking_metrics import pass_at_k

    scores = {k: [] for k in KS}
    for task in gold.tasks:
        if expression is None:
            hits = [h.text for h in store.search.lexical(task.query, version, max(KS))]
        else:
            terms = sorted(set(tokenize(task.query)))
            if not terms:
                hits = []
            else:
                query = " | ".join(t.replace("'", "") for t in terms)
                found = conn.execute(
                    f"SELECT i FROM fts, to_tsquery('simple', %s) q WHERE tsv @@ q "
                    f"ORDER BY {expression} DESC, i LIMIT %s", (query, max(KS))).fetchall()
                hits = [chunks[i].text for (i,) in found]
        ranking = [task.satisfied_by(text) for text in hits]
        for k in KS:
            scores[k].append(pass_at_k(ranking, len(task.evidence), k))
    return {"ranking": name, **{f"pass_at_{k}": round(100 * statistics.mean(v), 2) for k, v in scores.items()}}


if __name__ == "__main__":
    sys.exit(main())
