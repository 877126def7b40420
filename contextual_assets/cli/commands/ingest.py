"""`ctx ingest`: register files and materialize their partitions through the Dagster definitions, on
the instance the UI reads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import dagster as dg
from tqdm import tqdm

from contextual_assets.cli.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from contextual_assets.cli.ingest_runs import (
    PartitionOutcome,
    collect_sources,
    ensure_dagster_home,
    ingest_partitions,
    recover_dead_runs,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.errors import ContextualError, DependencyUnavailable
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.lifecycle.build_targets import weights_changes
from contextual_assets.lifecycle.coverage import production_lag
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.parsing.objects import is_object_url, local_location
from contextual_assets.deployment import Deployment, configured_deployment
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="files or folders; a file is keyed by its path relative to the "
                        "inbox, else to CTX_SOURCE_ROOT (default: the current directory), else by its absolute path; "
                        "a file ingested before keeps its key")
    parser.add_argument("--json", action="store_true", help="print per-document outcomes as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Dagster's run logs (on stderr)")


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    ensure_dagster_home(settings.home)
    deployment = configured_deployment(settings)
    store = deployment.store
    sources, refused = collect_sources(
        args.paths, inbox=Path(local_location(settings.inbox)) if not is_object_url(settings.inbox) else None,
        source_root=Path(settings.source_root) if settings.source_root else None,
        registered={s.path: s.doc_id for s in store.corpus.list_sources()})
    for reason in refused:
        print(f"skipped: {reason}", file=sys.stderr)
    if not sources:
        print("nothing to ingest", file=sys.stderr)
        return EXIT_USAGE if not refused else EXIT_FAILED
    for warning in _weights_warnings(deployment, store):
        print(f"warning: {warning}", file=sys.stderr)
    outcomes = _ingest(settings, store, sources, args)
    failed = [o for o in outcomes if not o.success]
    if args.json:
        print(json.dumps([o.model_dump() for o in outcomes], indent=2))
    else:
        print(f"{len(outcomes) - len(failed)} ingested, {len(failed)} failed; store {store.location}; "
              f"index version {deployment.current_index_version()}")
    lag = production_lag(store)
    if lag is not None and not lag.complete:
        print(f"warning: {lag.summary(PRODUCTION_ALIAS)}: search serves production without them until a "
              "candidate is promoted (`ctx status` lists them)", file=sys.stderr)
    return EXIT_FAILED if failed or refused else EXIT_OK


def _ingest(settings: PlatformSettings, store: ChunkStore, sources: list[tuple[str, Path]],
            args: argparse.Namespace) -> list[PartitionOutcome]:
    """Register the sources and run their partitions, each document's outcome shown as it is known
    (a progress bar on a terminal, a line per document unless --json)."""
    defs = build_definitions(settings)
    with dg.DagsterInstance.get() as instance:
        for line in recover_dead_runs(instance, store):
            print(f"recovered: {line}", file=sys.stderr)
        register_sources(store, instance, sources)
        bar = tqdm(total=len(sources), unit="doc", desc="ingest", disable=args.json or not sys.stderr.isatty())

        def done(outcome: PartitionOutcome) -> None:
            bar.update(1)
            if not args.json:
                status = f"ok   {outcome.chunks:5d} chunks" if outcome.success else "FAIL"
                tqdm.write(f"{status}  {outcome.key}" + (f"  -- {outcome.error}" if outcome.error else ""),
                           file=sys.stderr)

        outcomes = ingest_partitions(defs, instance, sources, on_done=done,
                                     log_level="DEBUG" if args.verbose else "CRITICAL")
        bar.close()
    return outcomes


def _weights_warnings(deployment: Deployment, store: ChunkStore) -> list[str]:
    """The served model name now serves other weights than an index version recorded (ingest builds a
    new version; said here too, since the run's own warning is not printed)."""
    headers = deployment.headers
    try:
        if headers.resolved_source()[0] != "openai":
            return []
        served = DEFAULT_DISCOVERY.resolve_fleet(headers.fleet_config()).name
        return weights_changes(store, served, headers.identity()["header_model"], deployment.current_index_version())
    except DependencyUnavailable:
        raise  # a replica is down: every document's run would fail on it (exit 3, before any run)
    except ContextualError:
        return []  # e.g. no usable model: every document's run reports it
