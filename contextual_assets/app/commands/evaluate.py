"""`ctx eval`: run `evaluate_and_promote` (retrieval_eval, its checks, promoted_index) in this process,
on the instance the UI reads, and report the gate's decision (exit 0 passed, 1 blocked)."""

from __future__ import annotations

import argparse
import json
import math
import sys

import dagster as dg

from contextual_assets.app.cli import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from contextual_assets.app.ingest_runs import ensure_dagster_home, failure_cause, failure_message
from contextual_assets.definitions import build_definitions
from contextual_assets.errors import ConfigurationError, ContextualError, DependencyUnavailable
from contextual_assets.names import EVALUATE_AND_PROMOTE_JOB, PROMOTED_INDEX, RETRIEVAL_EVAL
from contextual_assets.platform import Platform
from contextual_assets.settings import PlatformSettings, fields_from
from eval_assets.gate_config import GateConfig
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
    platform = Platform(settings)
    store = platform.store  # the database down: exit 3 here, not a failed run
    alias = GateConfig(**fields_from(settings, GateConfig.SETTINGS)).alias
    # The candidate's version needs the header fleet (its served weights): a down fleet exits 3 here.
    candidate = args.version or platform.current_index_version()
    before = store.aliases.get(alias)
    result = _evaluate_and_promote(settings, gold_path, args.version)
    report = evaluation_report(result, candidate, before, store.aliases.get(alias))
    code = _evaluation_exit(result, report)
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
    print(f"production -> {report['production_after'] or 'none'}")
    return code


def _evaluate_and_promote(settings: PlatformSettings, gold_path: str, version: str) -> dg.ExecuteInProcessResult:
    defs = build_definitions(settings)
    config = {"gold_path": gold_path, "index_version": version}
    with dg.DagsterInstance.get() as instance:
        return defs.resolve_job_def(EVALUATE_AND_PROMOTE_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config={
                "ops": {RETRIEVAL_EVAL: {"config": config}},
                "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})


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


def evaluation_report(result, candidate: str, before: str | None, after: str | None) -> dict:
    """What `ctx eval --json` prints: the candidate, production before and after, whether the gate
    passed and the candidate was promoted, every check, and the evaluation's metrics."""
    checks = [{"name": c.check_name, "passed": c.passed, "severity": c.severity.value,
               "metadata": {k: _plain(v) for k, v in c.metadata.items()}} for c in result.get_asset_check_evaluations()]
    evaluation = next((e.materialization.metadata for e in result.get_asset_materialization_events()
                       if e.materialization.asset_key.to_user_string() == RETRIEVAL_EVAL), None)
    gate = next((c for c in checks if c["name"] == "eval_gate"), None)
    metadata = {k: _plain(v) for k, v in (evaluation or {}).items()}
    return {
        "candidate": metadata.get("candidate_version") or candidate,
        "production_before": before,
        "production_after": after,
        "evaluated": evaluation is not None,
        "gate_passed": bool(gate and gate["passed"]),
        "promoted": bool(result.asset_materializations_for_node(PROMOTED_INDEX)),
        "gate_reasons": metadata.get("gate_reasons"),
        "checks": checks,
        # The numbers the gate compared (per mode and metric, coverage, gold health), the table as text.
        "metrics": {k: v for k, v in metadata.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        "comparison": metadata.get("comparison"),
        # Why the evaluation or the promotion did not happen; a blocked gate says why in gate_reasons.
        "error": None if result.success or (evaluation is not None and gate is not None and not gate["passed"])
        else failure_message(result),
    }


def _evaluation_exit(result, report: dict) -> int:
    """0: the gate passed and production is the candidate; 1: the gate blocked (or promotion failed);
    3: the evaluation could not run for a dependency; 2: it could not run for something to change."""
    if report["evaluated"]:
        return EXIT_OK if report["gate_passed"] and report["promoted"] else EXIT_FAILED
    cause = failure_cause(result)
    if cause in _error_names(dependency=True) or _failure_says_unavailable(result):
        return EXIT_UNAVAILABLE
    # dg.Failure is the assets' one-line, user-facing refusal (no chunks, an embedder that cannot load).
    return EXIT_USAGE if cause == "Failure" or cause in _error_names(dependency=False) else EXIT_FAILED


def _failure_says_unavailable(result) -> bool:
    """A step's one-line failure that wraps an outage (`contextual_assets.defs.evaluation.assets.refusal`)."""
    for event in result.get_step_failure_events():
        data = event.step_failure_data.user_failure_data if event.step_failure_data else None
        flag = data.metadata.get("dependency_unavailable") if data else None
        if flag is not None and bool(getattr(flag, "value", flag)):
            return True
    return False


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
