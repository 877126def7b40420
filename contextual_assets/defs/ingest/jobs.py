"""The ingest job: every asset of the ingest group, several document partitions per run."""

import dagster as dg

from contextual_assets.names import INGEST_GROUP, INGEST_JOB


@dg.definitions
def ingest_jobs() -> dg.Definitions:
    # Job objects are built per Definitions: Dagster caches resolution state on them.
    return dg.Definitions(jobs=[dg.define_asset_job(
        INGEST_JOB,
        selection=dg.AssetSelection.groups(INGEST_GROUP),
        tags={"ctx/kind": "ingest"},
        description="Parse, header, embed and commit document partitions (several per run, pipelined).",
    )])
