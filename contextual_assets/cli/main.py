"""`ctx`: ingest, search and status from the command line, through the same Dagster definitions,
instance and store as the UI. Settings come from the environment (see README).

Each command is a module under `contextual_assets.cli.commands` (`add_arguments(parser)`, `run(args)`),
imported only when that command is parsed and run: `ctx search` loads neither Dagster nor torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Iterable
from types import ModuleType

from contextual_assets import package_version
from contextual_assets.errors import ContextualError, DependencyUnavailable
from contextual_assets.log_format import install_log_format
from contextual_assets.settings import PlatformSettings

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
EXIT_CODES_HELP = """exit codes:
  0  done (every document ingested; the gate passed)
  1  some documents failed or were refused (a missing or unsupported file), the gate blocked the candidate,
     or (`ctx migrate --check`) schema migrations are pending
  2  usage or configuration: a bad argument or setting, a missing gold file, a store schema this release cannot
     use (the message names what to change)
  3  a dependency is unavailable: the database, the header fleet, a reranker, or the search service"""
# Libraries that log below WARNING on their own loggers (bm25s sets DEBUG on itself), or warn per retry.
_NOISY_LOGGERS = {"bm25s": logging.WARNING, "sentence_transformers": logging.WARNING,
                  "transformers": logging.WARNING, "httpx": logging.WARNING, "httpcore": logging.WARNING,
                  "urllib3": logging.WARNING, "huggingface_hub": logging.WARNING, "filelock": logging.WARNING,
                  "psycopg.pool": logging.ERROR}

# Each command, in `ctx --help` order: its module under contextual_assets.cli.commands, and its help.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("ingest", "ingest files or folders through the Dagster assets"),
    "search": ("search", "search the index"),
    "serve": ("serve", "serve search over HTTP (POST /v1/search and /v1/search/batch, GET /v1/versions, "
                       "/healthz, /readyz, /metrics, /openapi.json)"),
    "rollback": ("rollback", "point the production alias back at an older version (repeated: older still; "
                             "--to VERSION)"),
    "eval": ("evaluate", "evaluate the candidate index against production; promote it if the gate passes "
                         "(exit 0 passed, 1 blocked)"),
    "status": ("status", "store, settings, index versions with their coverage, the candidate, and the "
                         "header fleet's health"),
    "inbox": ("inbox", "the removals the inbox sensor holds back (too many at once): list them, or confirm them"),
    "migrate": ("migrate", "apply the store's pending schema migrations (before rolling a new release; search "
                           "replicas never migrate); --check: exit 1 while some are pending"),
}


def configure_logging() -> None:
    """Library logs go to stderr, WARNING and up, whatever level a library gives its own logger: stdout
    carries only what a command prints (results, --json). Dagster's run logs have their own logger."""
    root = logging.getLogger()
    if not any(getattr(h, "ctx_cli", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)  # on the handler too: a logger set to DEBUG still propagates here
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        handler.ctx_cli = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name, level in _NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def command_module(name: str) -> ModuleType:
    """The module that defines and runs `ctx <name>` (imported on first use)."""
    return importlib.import_module(f"contextual_assets.cli.commands.{COMMANDS[name][0]}")


def build_parser(with_arguments: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """`ctx` with every command. The arguments of `with_arguments` only (default: of every command):
    a command's arguments come from its module, which this imports."""
    wanted = set(COMMANDS if with_arguments is None else with_arguments)
    parser = argparse.ArgumentParser(prog="ctx", description="Contextual-retrieval ingestion platform",
                                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ctx {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do:")
    for name, (_, help) in COMMANDS.items():
        command = sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".",
                                 epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
        if name in wanted:
            command_module(name).add_arguments(command)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (`ctx` itself takes only -h)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    configure_logging()  # before a command's module loads its libraries
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    name = _command_in(argv)
    args = build_parser([name] if name in COMMANDS else []).parse_args(argv)  # a usage error exits 2 here
    try:
        # After the arguments (--help and --version need no settings); a bad setting is the error below.
        install_log_format(PlatformSettings.from_env().log_format)
        return command_module(args.command).run(args)
    except DependencyUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except ContextualError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
