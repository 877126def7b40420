"""The promotion gate on hand-made task rows: floors, the stale+broken ceiling, lost evidence,
tolerance beside paired significance, scoped reviewed exceptions, caller blocking reasons."""

from __future__ import annotations

import json
import math
from datetime import date

import pytest

from contextual_assets.errors import ConfigurationError
from contextual_assets.settings import PlatformSettings
from eval_assets.dashboard import comparison_table
from eval_assets.evaluate import EvalReport, ModeMetrics, TaskResult
from eval_assets.gate import (
    ExceptionScope,
    GatePolicy,
    ReviewedException,
    applicable_exceptions,
    decide,
    load_exceptions,
)
from contextual_assets.defs.resources import EvalGateResource
from eval_assets.significance import (
    bootstrap_mean_ci,
    paired_deltas,
    sign_counts,
    sign_test_p,
)

SCOPE = ExceptionScope(index_version="iv-y", header_model="m1", evaluator_id="e1", today=date(2026, 1, 15))


def row(task_id: str, rank: int | None = 1, status: str = "living", mode: str = "hybrid", **override) -> dict:
    """A graded task with one gold item first found at `rank` (None: not found)."""
    found = lambda k: 1.0 if rank is not None and rank <= k else 0.0
    values = {"task_id": task_id, "mode": mode, "status": status, "first_rank": rank, "pass_at_5": found(5),
              "pass_at_10": found(10), "pass_at_20": found(20), "reciprocal_rank": 1 / rank if rank else 0.0,
              "ndcg_at_10": 1 / math.log2(rank + 1) if rank and rank <= 10 else 0.0}
    return values | override


def tasks(n: int, rank: int | None = 1, prefix: str = "t") -> list[dict]:
    return [row(f"{prefix}{i}", rank) for i in range(n)]


def verdict(decision, metric: str):
    return next(v for v in decision.verdicts if v.metric == metric)


def exception(task_id: str = "t3", **fields) -> ReviewedException:
    values = {"reason": "gold chunk reworded", "reviewer": "qa", "date": date(2026, 1, 2), "expires": date(2026, 6, 30),
              "index_version": "iv-y", "evaluator_id": "e1"} | fields
    return ReviewedException(task_id=task_id, **values)


# --- defaults ---------------------------------------------------------------------------------------

def test_policy_defaults_come_from_settings():
    policy = GatePolicy()
    assert policy.floors == json.loads(PlatformSettings.default("gate_floors_json"))
    assert policy.floors, "the default policy has floors: a zero candidate cannot pass by an empty dict"
    assert policy.max_unhealthy_share == PlatformSettings.default("gate_max_unhealthy_share")
    assert policy.tolerance == PlatformSettings.default("gate_tolerance")
    resource = EvalGateResource()
    assert resource.min_coverage == PlatformSettings.default("gate_min_coverage")
    assert resource.policy().max_unhealthy_share == PlatformSettings.default("gate_max_unhealthy_share")
    assert EvalGateResource(max_unhealthy_share=0.4).policy().max_unhealthy_share == 0.4


def test_unknown_floor_metric_is_a_configuration_error():
    with pytest.raises(ValueError, match="pass@10"):
        GatePolicy(floors={"pass@10": 0.5})
    with pytest.raises(ConfigurationError, match="CTX_GATE_FLOORS"):
        EvalGateResource(floors_json='{"pass@10": 0.5}').policy()


# --- never pass by accident -------------------------------------------------------------------------

def test_zero_candidate_never_passes_with_default_policy():
    first = decide(tasks(10, rank=None), None, GatePolicy(), [])
    assert not first.passed
    assert any("below the floor" in r for r in first.reasons)
    against_zero = decide(tasks(10, rank=None), tasks(10, rank=None), GatePolicy(), [])
    assert not against_zero.passed, "no regression against an equally empty production is no reason to promote"
    assert verdict(against_zero, "mrr").delta == 0.0


def test_zero_candidate_fails_even_without_floors():
    decision = decide(tasks(10, rank=None), None, GatePolicy(floors={}), [])
    assert not decision.passed
    assert any("no gold evidence" in r for r in decision.reasons)
    assert decide(tasks(10, rank=3), None, GatePolicy(floors={}), []).passed


def test_first_promotion_healthy_candidate_passes():
    rows = tasks(18) + [row("s0", None, "stale"), row("s1", None, "broken")]  # 10% unhealthy
    decision = decide(rows, None, GatePolicy(), [])
    assert decision.passed, decision.reasons
    assert decision.compared_tasks == 18 and decision.unhealthy_share_production is None


def test_first_promotion_half_stale_is_blocked():
    rows = tasks(10) + [row(f"s{i}", None, "stale") for i in range(10)]
    decision = decide(rows, None, GatePolicy(), [])
    assert not decision.passed
    assert all(v.passed for v in decision.verdicts), "the living tasks meet the floors: the ceiling blocks"
    assert decision.unhealthy_share_candidate == 0.5
    assert any("above the ceiling 0.200" in r for r in decision.reasons)


def test_nineteen_of_twenty_stale_is_blocked():
    rows = [row("t0")] + [row(f"s{i}", None, "stale") for i in range(19)]
    decision = decide(rows, None, GatePolicy(), [])
    assert not decision.passed and decision.compared_tasks == 1
    assert decision.unhealthy_share_candidate == pytest.approx(0.95)
    assert any("ceiling" in r for r in decision.reasons)


def test_nothing_to_grade_blocks():
    rows = [row(f"s{i}", None, "stale") for i in range(3)]
    decision = decide(rows, rows, GatePolicy(max_unhealthy_share=1.0, max_unhealthy_increase=1.0), [])
    assert not decision.passed
    assert "no living gold task to compare on" in decision.reasons


# --- lost evidence ----------------------------------------------------------------------------------

def test_lost_evidence_counts_as_a_miss():
    production = tasks(20) + [row("tb", None, "broken")]
    lost = {"t1", "t4", "t9"}
    candidate = [row(r["task_id"], None, "stale") if r["task_id"] in lost else r for r in production]
    decision = decide(candidate, production, GatePolicy(), [])
    assert decision.lost_tasks == ["t1", "t4", "t9"]
    assert decision.compared_tasks == 20, "tb, broken in production too, stays out"
    assert "tb" not in decision.lost_tasks
    for metric in ("pass_at_10", "mrr", "ndcg_at_10"):
        assert verdict(decision, metric).delta == pytest.approx(-3 / 20)
        assert verdict(decision, metric).candidate_raw == pytest.approx(17 / 20), "lost tasks graded as misses"
    assert decision.notes == ["the candidate lost the evidence of 3 tasks living in production (t1, t4, t9)"]
    assert not any("lost the evidence" in r for r in decision.reasons), "a note, not a reason"
    assert not decision.passed, "a 0.15 drop on 20 tasks blocks through the metrics"


def test_lost_evidence_alone_does_not_block():
    production = tasks(30) + tasks(10, rank=None, prefix="m") + [row("tb", None, "broken")]
    candidate = ([row("t0", None, "stale")] + tasks(30)[1:] + tasks(2, prefix="m")
                 + tasks(10, rank=None, prefix="m")[2:] + [row("tb", None, "broken")])
    decision = decide(candidate, production, GatePolicy(), [])
    assert decision.lost_tasks == ["t0"] and decision.notes
    assert verdict(decision, "pass_at_10").delta == pytest.approx(1 / 40)
    assert decision.passed, decision.reasons


# --- tolerance and significance ---------------------------------------------------------------------

def test_one_flip_on_twenty_tasks_passes():
    production = tasks(20)
    candidate = [row("t0", None)] + tasks(20)[1:]
    decision = decide(candidate, production, GatePolicy(), [])
    v = verdict(decision, "pass_at_10")
    assert -v.delta > GatePolicy().tolerance, "the plain tolerance alone would have blocked"
    assert v.effective_tolerance == pytest.approx(1 / 20)
    assert not v.significant_drop and v.ci_high == 0.0
    assert v.p_sign == 1.0
    assert decision.passed, decision.reasons


def _mrr_drop(n_tasks: int, n_dropped: int) -> tuple[list[dict], list[dict]]:
    """MRR-only drops: the gold chunk slips from rank 1 to a reciprocal rank of 0.75, other metrics equal."""
    production = tasks(n_tasks)
    candidate = [row(r["task_id"], reciprocal_rank=0.75) if i < n_dropped else r for i, r in enumerate(production)]
    return candidate, production


def test_consistent_small_drop_is_significant_and_blocks():
    candidate, production = _mrr_drop(124, 8)
    decision = decide(candidate, production, GatePolicy(), [])
    mrr = verdict(decision, "mrr")
    assert -mrr.delta == pytest.approx(2 / 124) and -mrr.delta < GatePolicy().tolerance, "within the tolerance"
    assert mrr.effective_tolerance == pytest.approx(0.02)
    assert mrr.significant_drop and mrr.ci_high < 0
    assert mrr.p_sign == pytest.approx(2 / 2**8)
    assert not decision.passed
    assert [v.metric for v in decision.verdicts if not v.passed] == ["mrr"]
    assert "within the tolerance 0.020 but a significant drop" in mrr.reason
    assert "95% CI" in mrr.reason and "sign test p=0.00781" in mrr.reason


def test_same_drop_on_two_tasks_is_not_significant():
    candidate, production = _mrr_drop(124, 2)
    decision = decide(candidate, production, GatePolicy(), [])
    mrr = verdict(decision, "mrr")
    assert not mrr.significant_drop and mrr.ci_high == 0.0
    assert decision.passed, decision.reasons


def test_big_drop_on_many_tasks_gives_both_reasons():
    production = tasks(60)
    candidate = [row(r["task_id"], None) if i < 30 else r for i, r in enumerate(production)]
    decision = decide(candidate, production, GatePolicy(), [])
    assert not decision.passed
    v = verdict(decision, "pass_at_10")
    assert v.candidate == 0.5 and v.floor == 0.5, "the floor is met: the regression blocks"
    assert v.delta == pytest.approx(-0.5) and v.significant_drop
    assert "over the tolerance 0.020 and a significant drop" in v.reason
    assert v.reason in decision.reasons


def test_bootstrap_is_deterministic():
    deltas = [(i * 37 % 11 - 5) / 7 for i in range(30)]
    assert bootstrap_mean_ci(deltas) == bootstrap_mean_ci(deltas)
    assert bootstrap_mean_ci(deltas, seed=1) != bootstrap_mean_ci(deltas), "the seed is what fixes it"
    low, high = bootstrap_mean_ci(deltas)
    assert low < sum(deltas) / len(deltas) < high
    assert bootstrap_mean_ci([-0.1] * 5) == pytest.approx((-0.1, -0.1))
    candidate, production = _mrr_drop(124, 8)
    first = decide(candidate, production, GatePolicy(), []).model_dump()
    assert decide(candidate, production, GatePolicy(), []).model_dump() == first


def test_sign_test_known_values():
    assert sign_test_p(0, 6) == pytest.approx(0.03125)
    assert sign_test_p(6, 0) == pytest.approx(0.03125)
    assert sign_test_p(1, 5) == pytest.approx(14 / 64)
    assert sign_test_p(1, 9) == pytest.approx(22 / 1024)
    assert sign_test_p(5, 5) == 1.0 and sign_test_p(0, 0) == 1.0
    assert sign_counts(paired_deltas([1.0, 0.5, 0.2, 0.3], [0.5, 0.5, 0.2 + 1e-12, 0.6])) == (1, 1), (
        "equal scores and float noise are ties, dropped")


# --- reviewed exceptions ----------------------------------------------------------------------------

def test_exceptions_without_scope_or_expiry_are_not_applied():
    cases = {
        "expired": exception(expires=date(2020, 6, 30)),
        "no expiry": exception(expires=None),
        "other version": exception(index_version="iv-x"),
        "other evaluator": exception(evaluator_id="e0"),
        "no evaluator": exception(evaluator_id=None),
        "unscoped": exception(index_version=None),
        "other header model": exception(index_version=None, header_model="m2"),
    }
    applied, ignored = applicable_exceptions(list(cases.values()), SCOPE)
    assert applied == []
    assert ignored == [
        "t3: expired on 2020-06-30",
        "t3: no expiry date",
        "t3: scoped to version iv-x, this is iv-y",
        "t3: scoped to evaluator e0, this is e1",
        "t3: no evaluator_id: name the evaluator it was reviewed under",
        "t3: no scope: name index_version or header_model",
        "t3: scoped to header model m2, this is m1",
    ]
    assert applicable_exceptions([exception()], None) == ([], ["t3: no scope given"])


def test_exceptions_in_scope_apply_through_the_last_day():
    in_scope = [exception(), exception("t4", expires=SCOPE.today, index_version=None, header_model="m1")]
    applied, ignored = applicable_exceptions(in_scope, SCOPE)
    assert applied == in_scope and ignored == []


def test_applied_exception_keeps_the_raw_score():
    candidate = [row("t3", None)] + [row(f"t{i}") for i in range(10) if i != 3]  # t3 missed, nine found
    decision = decide(candidate, None, GatePolicy(), [exception()], scope=SCOPE)
    v = verdict(decision, "pass_at_10")
    assert decision.excepted_tasks == ["t3"] and decision.ignored_exceptions == []
    assert v.candidate_raw == pytest.approx(9 / 10), "the raw number is never rewritten"
    assert v.candidate == 1.0 and decision.compared_tasks == 9


def test_out_of_scope_exception_changes_nothing():
    candidate = [row("t3", None)] + [row(f"t{i}") for i in range(10) if i != 3]
    expired = exception(expires=date(2020, 6, 30))
    other = exception(evaluator_id="e0")
    decision = decide(candidate, None, GatePolicy(), [expired, other], scope=SCOPE)
    assert decision.excepted_tasks == [] and decision.compared_tasks == 10
    assert decision.ignored_exceptions == ["t3: expired on 2020-06-30", "t3: scoped to evaluator e0, this is e1"]
    assert verdict(decision, "pass_at_10").candidate == pytest.approx(9 / 10)
    unscoped = decide(candidate, None, GatePolicy(), [exception()])
    assert unscoped.excepted_tasks == [] and unscoped.ignored_exceptions == ["t3: no scope given"]


def test_exception_on_a_lost_task_excuses_the_miss():
    production = tasks(20)
    candidate = [row("t3", None, "stale")] + [r for r in production if r["task_id"] != "t3"]
    decision = decide(candidate, production, GatePolicy(), [exception()], scope=SCOPE)
    assert decision.lost_tasks == ["t3"] and decision.excepted_tasks == ["t3"]
    assert decision.compared_tasks == 19 and verdict(decision, "mrr").delta == 0.0
    assert verdict(decision, "mrr").candidate_raw == pytest.approx(19 / 20)


def test_load_exceptions_reads_scope_fields(tmp_path):
    path = tmp_path / "exceptions.yaml"
    path.write_text("- {task_id: t3, reason: reworded, reviewer: qa, date: 2026-01-02, expires: 2026-06-30,\n"
                    "   index_version: iv-y, evaluator_id: e1}\n")
    (loaded,) = load_exceptions(str(path))
    assert loaded == exception(reason="reworded")
    assert applicable_exceptions([loaded], SCOPE)[0] == [loaded]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "t3", "reason": "", "reviewer": "qa", "date": "2026-01-02"}\n')
    with pytest.raises(ConfigurationError, match="invalid reviewed exception"):
        load_exceptions(str(bad))
    with pytest.raises(ConfigurationError, match="not found"):
        load_exceptions(str(tmp_path / "missing.yaml"))


# --- caller reasons, serialisation, dashboard -------------------------------------------------------

def test_blocking_reasons_fail_the_gate():
    coverage = "candidate covers 61 of 90 live documents; 3 at an older revision"
    assert decide(tasks(10), tasks(10), GatePolicy(), []).passed
    decision = decide(tasks(10), tasks(10), GatePolicy(), [], blocking=[coverage])
    assert not decision.passed and decision.reasons == [coverage]


def test_decision_serialises_with_the_fields_assets_read():
    candidate, production = _mrr_drop(124, 8)
    stored = decide(candidate, production, GatePolicy(), [exception("t99")], scope=SCOPE).model_dump(mode="json")
    for key in ("passed", "mode", "compared_tasks", "excepted_tasks", "verdicts", "unhealthy_share_candidate",
                "unhealthy_share_production", "reasons", "lost_tasks", "ignored_exceptions", "notes"):
        assert key in stored
    for key in ("metric", "candidate_raw", "candidate", "production", "delta", "floor", "passed", "reason",
                "ci_low", "ci_high", "p_sign", "effective_tolerance", "significant_drop"):
        assert key in stored["verdicts"][0]
    json.dumps(stored)


def _report(rows: list[dict]) -> EvalReport:
    living = [r for r in rows if r["status"] == "living"]
    mean = lambda k: sum(r[k] for r in living) / len(living)
    metrics = ModeMetrics(mode="hybrid", n_queries=len(living), pass_at_5=mean("pass_at_5"),
                          pass_at_10=mean("pass_at_10"), pass_at_20=mean("pass_at_20"), mrr=mean("reciprocal_rank"),
                          ndcg_at_10=mean("ndcg_at_10"))
    return EvalReport(run_id="r", index_version="iv", gold_set="g", gold_sha256="0", evaluator_id="e1", evaluator={},
                      metrics={"hybrid": metrics}, tasks=[TaskResult(**r) for r in rows],
                      stale=sorted(r["task_id"] for r in rows if r["status"] == "stale"), broken=[])


def test_comparison_table_shows_significance_lost_tasks_and_ignored_exceptions():
    production = tasks(20)
    candidate = [row("t1", None, "stale")] + [r for r in production if r["task_id"] != "t1"]
    decision = decide(candidate, production, GatePolicy(), [exception("t5", expires=None)], scope=SCOPE)
    table = comparison_table(_report(candidate), _report(production), decision)
    mrr = verdict(decision, "mrr")
    assert f"{mrr.ci_low:+.3f}..{mrr.ci_high:+.3f}" in table
    assert "| sign p | tolerance |" in table and "| 0.050 |" in table
    assert "Lost tasks (living in production, not in the candidate): t1" in table
    assert "t5: no expiry date" in table
    assert "Notes: the candidate lost the evidence of 1 tasks" in table
