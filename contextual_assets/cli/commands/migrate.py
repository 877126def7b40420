"""`ctx migrate`: bring the configured store's schema to this release's, once, before the processes that
use it are rolled (a compose one-shot, a Helm pre-upgrade hook). Search replicas never migrate: they refuse
an older schema. `--check` applies nothing: exit 1 while migrations are pending."""

from __future__ import annotations

import argparse

from contextual_assets.cli.main import EXIT_FAILED, EXIT_OK
from contextual_assets.errors import SchemaOutdated
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import connect_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="apply nothing: exit 0 when the schema is this release's, 1 when migrations are pending")


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    store = connect_store(settings.database_url or None, settings.duckdb_path, pool_size=1)
    try:
        try:
            current = store.check_schema()
        except SchemaOutdated as exc:
            if exc.newer:
                raise  # migrated by a newer release: nothing this one may do (exit 2)
            if args.check:
                print(f"schema version {exc.current}, this release needs {exc.needed} "
                      f"(pending: {', '.join(map(str, store.pending_migrations()))}; run `ctx migrate`)")
                return EXIT_FAILED
        else:
            print(f"schema version {current} (up to date)")
            return EXIT_OK
        version, now = store.apply_migrations()
        print(f"schema version {version} ({'applied: ' + ', '.join(map(str, now)) if now else 'up to date'})")
        return EXIT_OK
    finally:
        store.close()
