"""Evaluation settings as a Dagster resource (configured from the environment in definitions)."""

from __future__ import annotations

import json

import dagster as dg

from .gate import GatePolicy, ReviewedException, load_exceptions


class EvalGateResource(dg.ConfigurableResource):
    """Gate policy: floors as JSON (`CTX_GATE_FLOORS='{"pass_at_10": 0.6}'`), a tolerance against
    production (`CTX_GATE_TOLERANCE`), reviewed exceptions (`CTX_GATE_EXCEPTIONS`), the alias name."""

    gold_path: str = ""
    mode: str = "hybrid"
    floors_json: str = "{}"
    tolerance: float = 0.02
    max_unhealthy_increase: float = 0.05
    hygiene_warn_share: float = 0.1
    exceptions_path: str = ""
    alias: str = "production"

    def policy(self) -> GatePolicy:
        return GatePolicy(mode=self.mode, floors=json.loads(self.floors_json or "{}"), tolerance=self.tolerance,
                          max_unhealthy_increase=self.max_unhealthy_increase)

    def exceptions(self) -> list[ReviewedException]:
        return load_exceptions(self.exceptions_path or None)
