"""The gate's configuration: policy, gold file, reviewed exceptions and the fusion the evaluation
searches with (the Dagster resource adapts it; the CLI reads the same)."""

from __future__ import annotations

import json
from typing import ClassVar

from pydantic import BaseModel, ValidationError

from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.settings import PlatformSettings

from .gate import GatePolicy, ReviewedException, load_exceptions

_policy_default = lambda name: GatePolicy.model_fields[name].default  # noqa: E731
_default = PlatformSettings.default


class GateConfig(BaseModel):
    """Gate policy: floors as JSON (`CTX_GATE_FLOORS='{"pass_at_10": 0.6}'`), a tolerance against
    production (`CTX_GATE_TOLERANCE`), a ceiling on the stale+broken gold share, the share of live
    documents a candidate must cover (`min_coverage`, checked by the caller), reviewed exceptions
    (`CTX_GATE_EXCEPTIONS`), the alias name."""

    gold_path: str = ""
    mode: str = _policy_default("mode")
    floors_json: str = _default("gate_floors_json")
    tolerance: float = _default("gate_tolerance")
    max_unhealthy_increase: float = _policy_default("max_unhealthy_increase")
    max_unhealthy_share: float = _default("gate_max_unhealthy_share")
    min_coverage: float = _default("gate_min_coverage")
    hygiene_warn_share: float = 0.1
    exceptions_path: str = ""
    alias: str = PRODUCTION_ALIAS
    fusion_weights_json: str = _default("fusion_weights_json")
    rerank: bool = _default("gate_rerank")

    SETTINGS: ClassVar[dict[str, str]] = {
        "gold_path": "gold_path", "floors_json": "gate_floors_json", "tolerance": "gate_tolerance",
        "max_unhealthy_share": "gate_max_unhealthy_share", "min_coverage": "gate_min_coverage",
        "exceptions_path": "gate_exceptions_path", "fusion_weights_json": "fusion_weights_json",
        "rerank": "gate_rerank"}

    def weights(self) -> FusionWeights:
        """The hybrid fusion the evaluation searches with (CTX_FUSION_WEIGHTS), as the service does."""
        try:
            return FusionWeights.model_validate_json(self.fusion_weights_json or "{}")
        except ValidationError as exc:
            raise ConfigurationError(f"CTX_FUSION_WEIGHTS={self.fusion_weights_json!r}: "
                                     f"{exc.errors()[0]['msg']}") from None

    def policy(self) -> GatePolicy:
        try:
            return GatePolicy(mode=self.mode, floors=json.loads(self.floors_json or "{}"), tolerance=self.tolerance,
                              max_unhealthy_increase=self.max_unhealthy_increase,
                              max_unhealthy_share=self.max_unhealthy_share)
        except (ValueError, ValidationError) as exc:  # a bad floor is a configuration error, named as such
            raise ConfigurationError(f"gate policy (CTX_GATE_FLOORS={self.floors_json!r}): {str(exc)[:300]}") from None

    def exceptions(self) -> list[ReviewedException]:
        return load_exceptions(self.exceptions_path or None)
