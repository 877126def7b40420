"""`retrieval_eval`: the gold set against the current index version, every retrieval mode."""


import os

import dagster as dg

from contextual_assets.assets import chunk_embeddings
from contextual_assets.index_version import index_fingerprint, index_version_of
from contextual_assets.resources import ChunkStoreResource, EmbedderResource, HeaderSourceResource, ParsingResource

from .evaluate import MODES, evaluate
from .gold import load_gold


class RetrievalEvalConfig(dg.Config):
    gold_path: str = ""  # empty: CTX_GOLD_FILE
    index_version: str = ""  # empty: the version the current settings build


def current_index_version(headers: HeaderSourceResource, embedder: EmbedderResource, parsing: ParsingResource) -> str:
    source = headers.build(parsing.counter())  # resolves the served model (discovery is cached)
    return index_version_of(index_fingerprint(source.identity, embedder.identity(), parsing.chunk_tokens))


@dg.asset(
    deps=[chunk_embeddings],
    group_name="evaluation",
    kinds={"python"},
    description="Pass@k, MRR and nDCG@10 of a gold file against the index, for dense, lexical and hybrid search.",
)
def retrieval_eval(
    context: dg.AssetExecutionContext,
    config: RetrievalEvalConfig,
    store: ChunkStoreResource,
    embedder: EmbedderResource,
    headers: HeaderSourceResource,
    parsing: ParsingResource,
) -> dg.MaterializeResult:
    gold_path = config.gold_path or os.environ.get("CTX_GOLD_FILE", "")
    if not gold_path:
        raise dg.Failure(description="no gold file: set CTX_GOLD_FILE or the gold_path run config")
    gold = load_gold(gold_path)
    version = config.index_version or current_index_version(headers, embedder, parsing)
    chunk_store = store.open()
    if chunk_store.count_chunks(version) == 0:
        raise dg.Failure(description=f"index version {version} holds no chunks; ingest documents first")
    report = evaluate(chunk_store, embedder.get(), gold, version)
    metadata: dict = {
        "index_version": version,
        "gold_set": gold.name,
        "gold_sha256": gold.sha256[:16],
        "n_queries": len(gold.tasks),
        "embedder": report.embedder,
        "grader_version": report.grader_version,
    }
    lines = ["| mode | Pass@5 | Pass@10 | Pass@20 | MRR | nDCG@10 |", "|---|---|---|---|---|---|"]
    for mode in MODES:
        m = report.metrics[mode]
        for name in ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10"):
            metadata[f"{mode}_{name}"] = round(getattr(m, name), 4)
        lines.append(f"| {mode} | {m.pass_at_5:.3f} | {m.pass_at_10:.3f} | {m.pass_at_20:.3f} | {m.mrr:.3f} | "
                     f"{m.ndcg_at_10:.3f} |")
    metadata["summary"] = dg.MetadataValue.md("\n".join(lines))
    return dg.MaterializeResult(metadata=metadata)
