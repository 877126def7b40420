"""`ctx`'s own surface without running anything: every argument explains itself; the exit codes are
documented; library loggers stay off stdout."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from contextual_assets.cli.main import EXIT_CODES_HELP, build_parser

REPO = Path(__file__).resolve().parents[2]


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands


def test_every_argument_of_every_command_has_help():
    parser = build_parser()
    commands = _commands(parser)
    assert set(commands.choices) == {"ingest", "search", "serve", "rollback", "eval", "status", "inbox",
                                     "migrate"}
    # Each command is described in `ctx --help`.
    listed = {a.dest: a.help for a in commands._choices_actions}
    assert set(listed) == set(commands.choices)
    assert all(text and text.strip() for text in listed.values()), listed
    for name, command in commands.choices.items():
        assert command.description and command.description.strip(), f"ctx {name} has no description"
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help != argparse.SUPPRESS, f"ctx {name} {action.option_strings or action.dest} is hidden"
            assert action.help and action.help.strip(), \
                f"ctx {name} {action.option_strings or action.dest} has no help text"


def test_exit_codes_are_documented_in_every_help():
    parser = build_parser()
    for code in ("0", "1", "2", "3"):
        assert f"\n  {code}  " in EXIT_CODES_HELP
    assert parser.epilog == EXIT_CODES_HELP and EXIT_CODES_HELP in parser.format_help()
    for name, command in _commands(parser).choices.items():
        assert EXIT_CODES_HELP in command.format_help(), f"ctx {name} --help lacks the exit codes"


def test_eval_and_status_take_json():
    parser = build_parser()
    assert parser.parse_args(["eval", "--json"]).json is True
    assert parser.parse_args(["status", "--json"]).json is True


def test_library_debug_logs_stay_off_stdout_and_below_warning():
    # bm25s sets DEBUG on its own logger: a library doing that must not reach stdout, nor stderr below WARNING.
    probe = ("import logging; from contextual_assets.cli.main import configure_logging; "
             "lib = logging.getLogger('somelib'); lib.setLevel(logging.DEBUG); configure_logging(); "
             "lib.debug('debug-line'); lib.info('info-line'); lib.warning('warning-line'); "
             "logging.getLogger('bm25s').debug('bm25s-line')")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "warning-line" in result.stderr
    for hidden in ("debug-line", "info-line", "bm25s-line"):
        assert hidden not in result.stderr


def test_version_is_the_installed_distributions_and_search_keeps_its_own_version_option():
    from importlib.metadata import version

    result = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "--version"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == f"ctx {version('contextual-retrieval-platform')}\n"
    # After the command, --version is still `ctx search`'s index version.
    assert build_parser().parse_args(["search", "q", "--version", "iv-1"]).version == "iv-1"


@pytest.mark.parametrize("pages, says", [
    ("1e40-", "give FROM-TO"), ("10000000000000000000000000000000000000000-", "from 1 to 2147483647"),
    ("-" + "9" * 5000, "from 1 to 2147483647"), ("0-3", "from 1 to 2147483647"), ("x-3", "give FROM-TO"),
    ("7-3", "7 is after 3"), ("3", "give FROM-TO"), ("-", "give FROM-TO"), ("", "give FROM-TO"),
    ("-3-5", "give FROM-TO")])
def test_a_bad_pages_value_is_one_line_naming_the_option_and_exit_2(pages, says, monkeypatch, capsys, tmp_path):
    from contextual_assets.cli.main import main

    monkeypatch.delenv("CTX_SEARCH_URL", raising=False)
    monkeypatch.setenv("CTX_HOME", str(tmp_path))
    assert main(["search", "q", f"--pages={pages}"]) == 2  # refused before any store or service is asked
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --pages {pages!r}: ") and says in err, err


def test_serve_refuses_an_open_address_without_a_token(monkeypatch, capsys, tmp_path):
    from contextual_assets.cli.main import main
    from tests.support import free_port

    # Were the refusal missing, these settings fail fast (no database) instead of serving.
    monkeypatch.setenv("DATABASE_URL", f"postgresql://ctx@127.0.0.1:{free_port()}/ctx")
    monkeypatch.setenv("CTX_SERVE_PORT", str(free_port()))
    monkeypatch.setenv("CTX_HOME", str(tmp_path))
    for token in (None, "", " \n"):  # unset, an empty Secret, a blank one
        if token is None:
            monkeypatch.delenv("CTX_SEARCH_TOKEN", raising=False)
        else:
            monkeypatch.setenv("CTX_SEARCH_TOKEN", token)
        for host in ("0.0.0.0", "10.1.2.3", "::"):
            assert main(["serve", "--host", host]) == 2, (token, host)
            err = capsys.readouterr().err
            assert err == f"error: refusing to serve on {host} without a token: set CTX_SEARCH_TOKEN, or pass " \
                          "--insecure to serve without one\n", err
    # --insecure goes past the check (to the store, which is down here: exit 3, not 2).
    assert main(["serve", "--host", "0.0.0.0", "--insecure"]) == 3
    assert "warning: serving on 0.0.0.0 without a token (--insecure)" in capsys.readouterr().err
