"""The code location: one `Definitions`, loaded from the `defs/` folder (one folder per domain).

`dagster dev`, `dg`, the gRPC code server (`workspace.yaml`) and the Kubernetes run pods load `defs`;
a bad setting there is a code-location load error whose message names the variable. Code that launches
runs with given settings (the CLI, tests, benchmarks) calls `build_definitions(settings)`: the same
folder, the same loader.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from contextual_assets.settings import PlatformSettings, settings_scope


def build_definitions(settings: PlatformSettings | None = None) -> dg.Definitions:
    """Every definition of the `defs/` folder, built for `settings` (default: the environment's)."""
    with settings_scope(settings or PlatformSettings.from_env()):
        return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
