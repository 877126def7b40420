"""The one `Definitions` object of the code location."""

from __future__ import annotations

import sys

import dagster as dg

from contextual_assets.defs.inbox_sensor import InboxOptions, build_new_documents_sensor
from contextual_assets.defs.ingest_assets import build_ingest_assets
from contextual_assets.defs.resources import build_resources
from contextual_assets.errors import ConfigurationError
from contextual_assets.settings import PlatformSettings
from eval_assets.assets import eval_assets_list, eval_checks, production_freshness


def build_definitions(settings: PlatformSettings | None = None) -> dg.Definitions:
    settings = settings or PlatformSettings.from_env()
    # Job objects are built per Definitions: Dagster caches resolution state on them.
    ingest_job = dg.define_asset_job(
        "ingest_documents",
        selection=dg.AssetSelection.groups("ingest"),
        tags={"ctx/kind": "ingest"},
        description="Parse, header, embed and commit document partitions (several per run, pipelined).",
    )
    evaluate_and_promote_job = dg.define_asset_job(
        "evaluate_and_promote",
        selection=dg.AssetSelection.assets("retrieval_eval", "promoted_index"),
        description="Evaluate the candidate index version against production; promote it only if eval_gate passes.",
    )
    freshness_job = dg.define_asset_job(
        "check_production_freshness",
        selection=dg.AssetSelection.checks(production_freshness),
        description="List documents missing from or outdated in the promoted index version (production_freshness).",
    )
    return dg.Definitions(
        assets=[build_ingest_assets(settings.partitions_per_run, settings.ingest_retries, settings.ingest_retry_delay_s),
                *eval_assets_list],
        asset_checks=eval_checks,
        jobs=[ingest_job, evaluate_and_promote_job, freshness_job],
        sensors=[build_new_documents_sensor(ingest_job, InboxOptions.from_settings(settings))],
        resources=build_resources(settings, env_vars=True),
        # One process per run, not per step: a step process costs ~3 s of imports per document.
        executor=dg.in_process_executor,
    )


try:
    defs = build_definitions()
except ConfigurationError as exc:
    # A bad setting: one line naming the variable, exit code 2, as `ctx` does (no traceback to dig through).
    print(f"contextual_retrieval: error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
