"""The code location: one `Definitions`, composed of two defs folders, each beside its library:
`contextual_assets/defs/` (ingest, the resources, the executor) and `eval_assets/defs/` (the evaluation:
retrieval_eval, the gate and its checks, promotion, their jobs).

One code location, not two: the gate's checks, `retrieval_eval` and the ingest assets share the
`documents` partitions, the resources built from one set of settings, and the runs `ctx eval` and the
production-freshness ingest launch; jobs and blocking checks only select assets of their own location.

`dagster dev`, `dg`, the gRPC code server (`workspace.yaml`) and the Kubernetes run pods load `defs`,
which reads the settings from the environment: a bad setting there is a code-location load error whose
message names the variable. Code that launches runs with given settings (the CLI, tests, benchmarks)
calls `build_definitions(settings)`: the same folders, the same loader.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

import eval_assets.defs
from contextual_assets.configuration import settings_scope
from contextual_assets.log_format import install_log_format
from contextual_assets.settings import PlatformSettings

PROJECT_ROOT = Path(__file__).parent.parent


def build_definitions(settings: PlatformSettings) -> dg.Definitions:
    """Every definition of both defs folders, built for `settings` (the only scope they are built in)."""
    with settings_scope(settings):
        ingest = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
        evaluation = dg.ComponentTree(defs_module=eval_assets.defs, project_root=PROJECT_ROOT).build_defs()
    # One component tree per Definitions: the evaluation's objects join the project's tree.
    return dg.Definitions.merge(ingest, dg.Definitions(
        assets=evaluation.assets, asset_checks=evaluation.asset_checks, jobs=evaluation.jobs,
        sensors=evaluation.sensors, schedules=evaluation.schedules, resources=evaluation.resources))


@dg.definitions
def defs() -> dg.Definitions:
    settings = PlatformSettings.from_env()
    # Our loggers and Python's root logger (CTX_LOG_FORMAT); Dagster's run logs keep Dagster's format.
    install_log_format(settings.log_format)
    return build_definitions(settings)
