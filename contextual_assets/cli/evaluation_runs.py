"""Evaluate and promote a candidate in one call: `evaluate_and_promote` over every document partition in
one run, in this process. An evaluation that production moved under (another evaluation promoted first),
or whose candidate changed (ingest wrote into it), is evaluated once more against the new state; one whose
candidate another evaluation promoted meanwhile ends as "already production". `ctx eval`, the gate
benchmark and the tests share it."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from contextual_assets.defs.ingest.partitions import range_run_tags
from contextual_assets.errors import ConfigurationError
from contextual_assets.lifecycle.run_liveness import this_process_tags
from contextual_assets.names import (
    BASE_MOVED,
    CANDIDATE_EVALUATION,
    DOCUMENTS_PARTITIONS,
    EVALUATE_AND_PROMOTE_JOB,
    PROMOTED_INDEX,
    RETRIEVAL_EVAL,
    STALE_EVALUATION,
)

BLOCKING_CHECKS = ("eval_gate", "header_integrity")


@dataclass
class EvaluationOutcome:
    result: dg.ExecuteInProcessResult
    attempts: int  # 2 when the first evaluation was voided by a concurrent promotion or ingest

    @property
    def checks(self) -> dict[str, dg.AssetCheckEvaluation]:
        return {c.check_name: c for c in self.result.get_asset_check_evaluations() if c.partition is None}

    @property
    def promotion(self) -> dict | None:
        """promoted_index's metadata (`action`: promoted, or already production), or None."""
        events = self.result.asset_materializations_for_node(PROMOTED_INDEX)
        return {k: v.value for k, v in events[-1].metadata.items()} if events else None


def failure_flag(result: dg.ExecuteInProcessResult, name: str) -> bool:
    """Whether a failed step's one-line failure carries `name` in its metadata (see the evaluation assets)."""
    for event in result.get_step_failure_events():
        data = event.step_failure_data.user_failure_data if event.step_failure_data else None
        flag = data.metadata.get(name) if data else None
        if flag is not None and bool(getattr(flag, "value", flag)):
            return True
    return False


def evaluate_and_promote(defs: dg.Definitions, instance: dg.DagsterInstance, gold_path: str, version: str = "",
                         log_level: str = "CRITICAL") -> EvaluationOutcome:
    """Every document partition of the candidate (`version`, or what the settings build now) evaluated in one
    run, then decided and promoted; evaluated once more when that evaluation was voided meanwhile."""
    config = {"config": {"gold_path": gold_path, "index_version": version}}
    run_config = {"ops": {RETRIEVAL_EVAL: config, CANDIDATE_EVALUATION: config},
                  "loggers": {"console": {"config": {"log_level": log_level}}}}
    job = defs.resolve_job_def(EVALUATE_AND_PROMOTE_JOB)
    for attempt in (1, 2):
        keys = instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS)
        if not keys:
            raise ConfigurationError("no documents to evaluate: ingest documents first (`ctx ingest PATH`)")
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=run_config,
                                        tags={**range_run_tags(keys), **this_process_tags()})
        if not (failure_flag(result, STALE_EVALUATION) or failure_flag(result, BASE_MOVED)):
            break
    return EvaluationOutcome(result, attempt)
