"""`ctx`'s own surface without running anything: every argument explains itself; library loggers stay quiet."""

from __future__ import annotations

import argparse

from contextual_assets.app.cli import build_parser


def test_every_argument_of_every_command_has_help():
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) == {"ingest", "search", "serve", "rollback", "eval", "status"}
    for name, command in commands.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"ctx {name} {action.option_strings or action.dest} has no help text"
