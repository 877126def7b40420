"""`ctx eval`: run `evaluate_and_promote` (every document partition of retrieval_eval, candidate_evaluation
and its checks, promoted_index) in this process, on the instance the UI reads, and report the gate's
decision (exit 0 passed and production is the candidate, 1 blocked)."""

from __future__ import annotations

import argparse
import json
import math
import sys

import dagster as dg

from contextual_assets.cli.main import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from contextual_assets.cli.evaluation_runs import BLOCKING_CHECKS, EvaluationOutcome, evaluate_and_promote, failure_flag
from contextual_assets.cli.ingest_runs import ensure_dagster_home, failure_cause, failure_message, recover_dead_runs
from contextual_assets.definitions import build_definitions
from contextual_assets.errors import ConfigurationError, ContextualError, DependencyUnavailable
from contextual_assets.names import CANDIDATE_EVALUATION
from contextual_assets.deployment import configured_deployment
from contextual_assets.settings import PlatformSettings
from eval_assets.gold.gold_set import load_gold


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", default="", help="gold file, JSONL or YAML (default: CTX_GOLD_FILE)")
    parser.add_argument("--version", default="", help="candidate index version (default: current settings)")
    parser.add_argument("--json", action="store_true",
                        help="print the candidate, production before and after, the gate, every check and the "
                             "metrics as one JSON object")


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    gold_path = args.gold or settings.gold_path
    if not gold_path:
        raise ConfigurationError("no gold file: pass --gold or set CTX_GOLD_FILE")
    load_gold(gold_path)  # a missing or malformed file is a usage error (2), found before any run
    ensure_dagster_home(settings.home)
    deployment = configured_deployment(settings)
    store = deployment.store  # the database down: exit 3 here, not a failed run
    alias = deployment.gate.alias
    # The candidate's version needs the header fleet (its served weights): a down fleet exits 3 here.
    candidate = args.version or deployment.current_index_version()
    before = store.aliases.get(alias)
    with dg.DagsterInstance.get() as instance:
        for line in recover_dead_runs(instance, store):
            print(f"recovered: {line}", file=sys.stderr)
        outcome = evaluate_and_promote(build_definitions(settings), instance, gold_path, args.version)
    report = evaluation_report(outcome, candidate, before, store.aliases.get(alias))
    code = _evaluation_exit(outcome.result, report)
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    for check in report["checks"]:
        print(f"check {check['name']:20s} {'passed' if check['passed'] else 'FAILED'}")
    if report["error"]:
        print(f"error: {report['error']}", file=sys.stderr)
    elif report["evaluated"] and not report["gate_passed"]:
        print(f"gate blocked {report['candidate']}: {report['gate_reasons']}", file=sys.stderr)
    if report["comparison"]:
        print(report["comparison"])
    already = " (already production: another evaluation promoted it)" if report["promotion"] == "already production" \
        else ""
    print(f"production -> {report['production_after'] or 'none'}{already}")
    return code


def _plain(value):
    """A metadata value as plain JSON (numbers, strings, lists, objects); anything else as its text."""
    value = value.value if isinstance(value, dg.MetadataValue) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def evaluation_report(outcome: EvaluationOutcome, candidate: str, before: str | None, after: str | None) -> dict:
    """What `ctx eval --json` prints: the candidate, production before and after, whether the gate
    passed and the candidate was promoted (or already was production), every check, the documents that
    regressed, and the evaluation's metrics."""
    result = outcome.result
    checks = [{"name": c.check_name, "passed": c.passed, "severity": c.severity.value,
               "metadata": {k: _plain(v) for k, v in c.metadata.items()}}
              for c in outcome.checks.values()]
    evaluation = next((e.materialization.metadata for e in result.get_asset_materialization_events()
                       if e.materialization.asset_key.to_user_string() == CANDIDATE_EVALUATION), None)
    blocking = [c for c in checks if c["name"] in BLOCKING_CHECKS]
    metadata = {k: _plain(v) for k, v in (evaluation or {}).items()}
    gate_passed = bool(blocking) and all(c["passed"] for c in blocking)
    reasons = [metadata.get("gate_reasons")] if metadata.get("gate_reasons") not in (None, "none") else []
    reasons += [c["metadata"].get("reasons") for c in blocking if c["name"] != "eval_gate" and not c["passed"]]
    promotion = outcome.promotion
    return {
        "candidate": metadata.get("candidate_version") or candidate,
        "production_before": before,
        "production_after": after,
        "evaluated": evaluation is not None,
        "gate_passed": gate_passed,
        "promoted": promotion is not None,
        "promotion": promotion.get("action") if promotion else None,
        "attempts": outcome.attempts,
        "gate_reasons": "; ".join(r for r in reasons if r) or ("none" if evaluation is not None else None),
        "documents_regressed": metadata.get("documents_regressed"),
        "checks": checks,
        # The numbers the gate compared (per mode and metric, coverage, gold health), the table as text.
        "metrics": {k: v for k, v in metadata.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        "comparison": metadata.get("comparison"),
        # Why the evaluation or the promotion did not happen; a blocked gate says why in gate_reasons.
        "error": None if result.success or (evaluation is not None and blocking and not gate_passed)
        else failure_message(result),
    }


def _evaluation_exit(result, report: dict) -> int:
    """0: the gate passed and production is the candidate; 1: the gate blocked (or promotion failed);
    3: the evaluation could not run for a dependency; 2: it could not run for something to change."""
    if report["evaluated"]:
        return EXIT_OK if report["gate_passed"] and report["promoted"] else EXIT_FAILED
    cause = failure_cause(result)
    if cause in _error_names(dependency=True) or failure_flag(result, "dependency_unavailable"):
        return EXIT_UNAVAILABLE
    # dg.Failure is the assets' one-line, user-facing refusal (no chunks, an embedder that cannot load).
    return EXIT_USAGE if cause == "Failure" or cause in _error_names(dependency=False) else EXIT_FAILED


def _error_names(dependency: bool) -> set[str]:
    """Class names of the project's errors: the DependencyUnavailable ones, or the others (a failed
    step records what it raised by name only)."""
    names, pending = set(), [ContextualError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if issubclass(cls, DependencyUnavailable) == dependency:
            names.add(cls.__name__)
    return names
