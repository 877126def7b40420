"""`ctx rollback`: point an alias (production) back at the version it pointed at before."""

from __future__ import annotations

import argparse

from contextual_assets.app.cli import EXIT_OK
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.platform import Platform
from contextual_assets.settings import PlatformSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alias", default=PRODUCTION_ALIAS,
                        help=f"the alias to move back (default: {PRODUCTION_ALIAS})")
    parser.add_argument("--reason", default="manual rollback", help="recorded in the alias history")


def run(args: argparse.Namespace) -> int:
    store = Platform(PlatformSettings.from_env()).store
    restored, replaced = store.aliases.rollback(args.alias, reason=args.reason)
    print(f"{args.alias}: {replaced} -> {restored}")
    return EXIT_OK
