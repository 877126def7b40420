"""The evaluation jobs: evaluate and promote, and the freshness check of production."""

import dagster as dg

from contextual_assets.names import CANDIDATE_EVALUATION, EVALUATE_AND_PROMOTE_JOB, PROMOTED_INDEX, RETRIEVAL_EVAL

from eval_assets.defs.assets import production_freshness


@dg.definitions
def evaluation_jobs() -> dg.Definitions:
    # Job objects are built per Definitions: Dagster caches resolution state on them.
    return dg.Definitions(jobs=[
        dg.define_asset_job(
            EVALUATE_AND_PROMOTE_JOB,
            selection=dg.AssetSelection.assets(RETRIEVAL_EVAL, CANDIDATE_EVALUATION, PROMOTED_INDEX),
            description="Evaluate the candidate index version against production, every document partition in "
                        "one run (a backfill of all partitions, or `ctx eval`), decide as a whole, and promote "
                        "it only if eval_gate and header_integrity pass.",
        ),
        dg.define_asset_job(
            "check_production_freshness",
            selection=dg.AssetSelection.checks(production_freshness),
            description="List documents missing from or outdated in the promoted index version "
                        "(production_freshness).",
        ),
    ])
