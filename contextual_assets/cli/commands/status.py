"""`ctx status`: prints `contextual_assets.lifecycle.status.deployment_status`, as a table or as JSON."""

from __future__ import annotations

import argparse
import json

from contextual_assets.cli.main import EXIT_OK
from contextual_assets.lifecycle.status import DeploymentStatus, deployment_status
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.deployment import configured_deployment
from contextual_assets.settings import PlatformSettings

_WIDTH = 22  # the label column


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    status = deployment_status(configured_deployment(PlatformSettings.from_env()))
    if args.json:
        print(json.dumps(status.model_dump(), indent=2))
        return EXIT_OK
    summary = status.model_dump()
    for key in ("store", "schema_version", "inbox", "header_source", "current_index_version", "production", "sources"):
        print(f"{key:{_WIDTH}s} {summary[key]}")
    if status.header_warning:
        print(f"{'note':{_WIDTH}s} {status.header_warning}")
    if status.lag is not None and not status.lag.complete:
        print(f"{'production lag':{_WIDTH}s} {status.lag.summary(PRODUCTION_ALIAS)}")
    if status.candidate is not None:
        cov = status.candidate["coverage"]
        print(f"{'candidate':{_WIDTH}s} {status.current_index_version} covers {cov['covered']}/{cov['live']} live "
              "(`ctx eval` promotes it if the gate passes)")
    _print_versions(status)
    _print_rollback(status)
    _print_fleet(status)
    return EXIT_OK


def _print_rollback(status: DeploymentStatus) -> None:
    """Production's history, where `ctx rollback` can go, what is kept for it, and held inbox removals."""
    if status.alias_history:
        moves = ", ".join(f"{h['action']} {h['index_version']}" for h in status.alias_history[-10:])
        earlier = f"{len(status.alias_history) - 10} earlier, " if len(status.alias_history) > 10 else ""
        print(f"{'production history':{_WIDTH}s} {earlier}{moves}")
        targets = ", ".join(status.rollback_targets) or "none (nothing older is left)"
        print(f"{'rollback targets':{_WIDTH}s} {targets}")
    for version, documents in status.retained.items():
        print(f"{'kept for rollback':{_WIDTH}s} {version}: {len(documents)} removed document(s) "
              f"({', '.join(documents[:5])}{', ...' if len(documents) > 5 else ''})")
    if status.held_removals:
        waiting = sum(1 for h in status.held_removals if h["confirmed_at"] is None)
        print(f"{'held removals':{_WIDTH}s} {len(status.held_removals)} ({waiting} unconfirmed): "
              f"{status.held_removals[0]['reason']}; `ctx inbox held`, `ctx inbox confirm-removals`")


def _print_versions(status: DeploymentStatus) -> None:
    for v in status.index_versions:
        fp, cov = v["fingerprint"], v["coverage"]
        role = " [production]" if v["index_version"] == status.production \
            else " [candidate]" if v["index_version"] == status.current_index_version else ""
        print(f"  {v['index_version']}  {v['documents']:4d} docs {v['chunks']:6d} chunks  "
              f"{fp['header_source']}/{fp['header_model']} {fp['embedder']} {fp['chunker']}  "
              f"covers {cov['covered']}/{cov['live']} live{role}")


def _print_fleet(status: DeploymentStatus) -> None:
    for replica in status.fleet or []:
        if replica["reachable"]:
            # Routed on the engine's own gauges when its /metrics names one, else on this process's counts.
            load = (f"  {replica['engine']} /metrics: running {replica['running']:g} waiting {replica['waiting']:g}"
                    if replica["engine"] else "  no engine /metrics: routed on local counts")
            print(f"{'fleet':{_WIDTH}s} {replica['base_url']}  up  {', '.join(replica['models']) or 'no models'}{load}")
        else:
            print(f"{'fleet':{_WIDTH}s} {replica['base_url']}  DOWN  {replica['error']}")
