"""The evaluation gate: absolute floors, and no regression beyond a tolerance against the promoted
version, per metric, on living gold shared by both; reviewed exceptions never rewrite a raw score."""

from __future__ import annotations

import json
import statistics
from datetime import date
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from contextual_assets.errors import ConfigurationError
from contextual_assets.settings import PlatformSettings

GATED_METRICS = ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10")


class GatePolicy(BaseModel):
    mode: str = "hybrid"
    floors: dict[str, float] = Field(default_factory=dict)  # e.g. {"pass_at_10": 0.6}
    tolerance: float = PlatformSettings.default("gate_tolerance")  # largest drop per metric against production
    max_unhealthy_increase: float = 0.05  # stale+broken share may not grow more than this


class ReviewedException(BaseModel):
    task_id: str
    reason: str = Field(min_length=1)
    reviewer: str = Field(min_length=1)
    date: date


def load_exceptions(path: str | None) -> list[ReviewedException]:
    if not path:
        return []
    file = Path(path)
    if not file.exists():
        raise ConfigurationError(f"reviewed-exceptions file {file} not found (CTX_GATE_EXCEPTIONS)")
    try:
        text = file.read_text(encoding="utf-8")
        items = ([json.loads(line) for line in text.splitlines() if line.strip()] if file.suffix == ".jsonl"
                 else (yaml.safe_load(text) or []))
        return [ReviewedException.model_validate(item) for item in items]
    except (ValueError, ValidationError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"{file}: invalid reviewed exception ({str(exc)[:200]})") from None


class MetricVerdict(BaseModel):
    metric: str
    candidate_raw: float
    candidate: float  # with reviewed exceptions applied
    production: float | None
    delta: float | None
    floor: float | None
    passed: bool
    reason: str = ""


class GateDecision(BaseModel):
    passed: bool
    mode: str
    compared_tasks: int
    excepted_tasks: list[str]
    verdicts: list[MetricVerdict]
    unhealthy_share_candidate: float
    unhealthy_share_production: float | None
    reasons: list[str]


def _mean(rows: list[dict], metric: str) -> float:
    key = "reciprocal_rank" if metric == "mrr" else metric  # MRR is the mean of per-task reciprocal ranks
    return statistics.mean(r[key] for r in rows) if rows else 0.0


def decide(candidate: list[dict], production: list[dict] | None, policy: GatePolicy,
           exceptions: list[ReviewedException]) -> GateDecision:
    """`candidate` / `production` are per-task rows (task_id, mode, status, metrics...)."""
    cand = {r["task_id"]: r for r in candidate if r["mode"] == policy.mode}
    prod = {r["task_id"]: r for r in production if r["mode"] == policy.mode} if production is not None else None
    living = {t for t, r in cand.items() if r["status"] == "living"}
    if prod is not None:
        living &= {t for t, r in prod.items() if r["status"] == "living"}
    excepted = sorted(living & {e.task_id for e in exceptions})
    kept = living - set(excepted)

    def unhealthy(rows: dict[str, dict]) -> float:
        return sum(1 for r in rows.values() if r["status"] != "living") / len(rows) if rows else 0.0

    reasons: list[str] = []
    verdicts: list[MetricVerdict] = []
    for metric in GATED_METRICS:
        raw = _mean([cand[t] for t in sorted(living)], metric)
        with_exceptions = _mean([cand[t] for t in sorted(kept)], metric)
        baseline = _mean([prod[t] for t in sorted(kept)], metric) if prod is not None else None
        delta = with_exceptions - baseline if baseline is not None else None
        floor = policy.floors.get(metric)
        passed, reason = True, ""
        if floor is not None and with_exceptions < floor:
            passed, reason = False, f"{metric} {with_exceptions:.3f} below the floor {floor:.3f}"
        elif delta is not None and delta < -policy.tolerance:
            passed, reason = False, f"{metric} fell {-delta:.3f} against production (tolerance {policy.tolerance:.3f})"
        if reason:
            reasons.append(reason)
        verdicts.append(MetricVerdict(metric=metric, candidate_raw=raw, candidate=with_exceptions, production=baseline,
                                      delta=delta, floor=floor, passed=passed, reason=reason))
    share_c = unhealthy(cand)
    share_p = unhealthy(prod) if prod is not None else None
    if share_p is not None and share_c - share_p > policy.max_unhealthy_increase:
        reasons.append(f"stale+broken gold share rose from {share_p:.3f} to {share_c:.3f}: the candidate lost evidence")
    if not living:
        reasons.append("no living gold task to compare on")
    elif not kept:
        reasons.append("every living task is under a reviewed exception: nothing left to compare on")
    return GateDecision(passed=not reasons, mode=policy.mode, compared_tasks=len(kept), excepted_tasks=excepted,
                        verdicts=verdicts, unhealthy_share_candidate=share_c, unhealthy_share_production=share_p,
                        reasons=reasons)
