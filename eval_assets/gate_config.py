"""The gate's configuration: policy, gold file, reviewed exceptions and the fusion the evaluation
searches with (the Dagster resource adapts it; the CLI reads the same)."""

from __future__ import annotations

import json
from pydantic import ValidationError

from contextual_assets.configuration import configured_by
from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights
from contextual_assets.names import PRODUCTION_ALIAS

from .gate import GatePolicy, ReviewedException, load_exceptions

_policy_default = lambda name: GatePolicy.model_fields[name].default  # noqa: E731


class GateConfig(configured_by("gate")):
    """Gate policy: floors as JSON (`CTX_GATE_FLOORS='{"pass_at_10": 0.6}'`), a tolerance against
    production (`CTX_GATE_TOLERANCE`), a ceiling on the stale+broken gold share, the share of live
    documents a candidate must cover (`min_coverage`, checked by the caller), reviewed exceptions
    (`CTX_GATE_EXCEPTIONS`), the alias name."""

    mode: str = _policy_default("mode")
    max_unhealthy_increase: float = _policy_default("max_unhealthy_increase")
    alias: str = PRODUCTION_ALIAS

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
