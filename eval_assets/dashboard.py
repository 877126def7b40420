"""What a person reads in the UI: tables and numeric metadata for every evaluation."""

from __future__ import annotations

from .evaluate import EvalReport
from .gate import GATED_METRICS, GateDecision


def metric_metadata(report: EvalReport) -> dict[str, float]:
    """Flat numeric metadata (`hybrid_pass_at_10`, ...) so the UI plots each metric over time."""
    return {f"{mode}_{name}": round(getattr(m, name), 4) for mode, m in report.metrics.items() for name in GATED_METRICS}


def _number(value: float | None, spec: str = ".3f") -> str:
    return format(value, spec) if value is not None else "-"


def comparison_table(candidate: EvalReport, production: EvalReport | None, decision: GateDecision) -> str:
    lines = [
        (f"**Gate {'passed' if decision.passed else 'FAILED'}** on {decision.compared_tasks} compared tasks "
         f"(mode {decision.mode}; {len(candidate.stale)} stale, {len(candidate.broken)} broken in the candidate; "
         f"{len(decision.lost_tasks)} living in production counted as misses)."),
        "",
        ("| metric | candidate (raw) | candidate (with exceptions) | candidate (compared) | production | delta "
         "| CI | sign p | tolerance | floor | verdict |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in decision.verdicts:
        ci_text = f"{v.ci_low:+.3f}..{v.ci_high:+.3f}" if v.ci_low is not None and v.ci_high is not None else "-"
        if v.significant_drop:
            ci_text += " (significant drop)"
        lines.append(f"| {v.metric} | {v.candidate_raw:.3f} | {v.candidate:.3f} | {_number(v.candidate_compared)} | "
                     f"{_number(v.production)} | {_number(v.delta, '+.3f')} | {ci_text} | {_number(v.p_sign, '.3g')} | "
                     f"{_number(v.effective_tolerance)} | {_number(v.floor)} | {'ok' if v.passed else v.reason} |")
    lines += ["", "| mode | Pass@5 | Pass@10 | Pass@20 | MRR | nDCG@10 |", "|---|---|---|---|---|---|"]
    for label, report in (("candidate", candidate), ("production", production)):
        if report is None:
            continue
        for mode, m in report.metrics.items():
            lines.append(f"| {label} {mode} | {m.pass_at_5:.3f} | {m.pass_at_10:.3f} | {m.pass_at_20:.3f} | "
                         f"{m.mrr:.3f} | {m.ndcg_at_10:.3f} |")
    lines.append("")
    lines.append("- Lost tasks (living in production, not in the candidate): "
                 + (", ".join(decision.lost_tasks) or "none"))
    lines.append("- Reviewed exceptions applied: " + (", ".join(decision.excepted_tasks) or "none"))
    if decision.ignored_exceptions:
        lines.append("- Exceptions not applied: " + "; ".join(decision.ignored_exceptions))
    if decision.notes:
        lines.append("- Notes: " + "; ".join(decision.notes))
    if decision.reasons:
        lines.append("- Reasons: " + "; ".join(decision.reasons))
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


def documents_table(documents: dict[str, dict], regressed: list[str], limit: int = 50) -> str:
    """The documents that regressed, each with why (the per-document rule), then how many passed."""
    if not regressed:
        return f"No document regressed ({len(documents)} evaluated)."
    lines = ["| document partition | gold tasks | why |", "|---|---|---|"]
    for key in regressed[:limit]:
        record = documents[key]
        lines.append(f"| {key} | {len(record['task_ids'])} | {'; '.join(record['reasons'])[:300]} |")
    return "\n".join(lines + ["", f"{len(documents) - len(regressed)} of {len(documents)} documents did not regress."])
