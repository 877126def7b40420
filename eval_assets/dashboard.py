"""What a person reads in the UI: tables and numeric metadata for every evaluation."""

from __future__ import annotations

from .evaluate import EvalReport
from .gate import GateDecision

METRICS = ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10")


def metric_metadata(report: EvalReport) -> dict[str, float]:
    """Flat numeric metadata (`hybrid_pass_at_10`, ...) so the UI plots each metric over time."""
    return {f"{mode}_{name}": round(getattr(m, name), 4) for mode, m in report.metrics.items() for name in METRICS}


def comparison_table(candidate: EvalReport, production: EvalReport | None, decision: GateDecision) -> str:
    lines = [
        f"**Gate {'passed' if decision.passed else 'FAILED'}** on {decision.compared_tasks} living tasks "
        f"(mode {decision.mode}; {len(candidate.stale)} stale, {len(candidate.broken)} broken excluded).",
        "",
        "| metric | candidate (raw) | candidate (with exceptions) | production | delta | floor | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in decision.verdicts:
        production_text = f"{v.production:.3f}" if v.production is not None else "-"
        delta_text = f"{v.delta:+.3f}" if v.delta is not None else "-"
        floor_text = f"{v.floor:.3f}" if v.floor is not None else "-"
        lines.append(f"| {v.metric} | {v.candidate_raw:.3f} | {v.candidate:.3f} | {production_text} | {delta_text} | "
                     f"{floor_text} | {'ok' if v.passed else v.reason} |")
    lines += ["", "| mode | Pass@5 | Pass@10 | Pass@20 | MRR | nDCG@10 |", "|---|---|---|---|---|---|"]
    for label, report in (("candidate", candidate), ("production", production)):
        if report is None:
            continue
        for mode, m in report.metrics.items():
            lines.append(f"| {label} {mode} | {m.pass_at_5:.3f} | {m.pass_at_10:.3f} | {m.pass_at_20:.3f} | "
                         f"{m.mrr:.3f} | {m.ndcg_at_10:.3f} |")
    if decision.reasons:
        lines += ["", "Reasons: " + "; ".join(decision.reasons)]
    return "\n".join(lines)


def regressions_table(regressions: list[dict]) -> str:
    if not regressions:
        return "No task ranks its gold chunk lower than production does."
    lines = ["| task | query | rank before | rank after |", "|---|---|---|---|"]
    for r in regressions:
        before = r["rank_before"] if r["rank_before"] is not None else "-"
        after = r["rank_after"] if r["rank_after"] is not None else "-"
        lines.append(f"| {r['task_id']} | {r['query'][:80]} | {before} | {after} |")
    return "\n".join(lines)
