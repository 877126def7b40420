"""`ctx rollback`: point an alias (production) back at an older version. Repeated, it walks back through
the versions the alias was promoted to (never forward again); `--to` moves to any version the walk-back
can reach. Rows a purge kept only for versions that can no longer be returned to are released."""

from __future__ import annotations

import argparse

from contextual_assets.cli.main import EXIT_OK
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.deployment import configured_deployment
from contextual_assets.settings import PlatformSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alias", default=PRODUCTION_ALIAS,
                        help=f"the alias to move back (default: {PRODUCTION_ALIAS})")
    parser.add_argument("--to", metavar="VERSION", default=None,
                        help="the version to return to: any version a repeated rollback would reach (`ctx status` "
                             "lists them; default: the one below the current)")
    parser.add_argument("--reason", default="manual rollback", help="recorded in the alias history")


def run(args: argparse.Namespace) -> int:
    store = configured_deployment(PlatformSettings.from_env()).store
    restored, replaced = store.aliases.rollback(args.alias, reason=args.reason, to=args.to)
    print(f"{args.alias}: {replaced} -> {restored}")
    store.corpus.release_retained(args.alias)
    return EXIT_OK
