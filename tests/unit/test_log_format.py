"""CTX_LOG_FORMAT=json: one JSON object a line on stderr, with the record's `extra` fields (the request
id); installed once however often it is asked, on the CLI's handler where there is one."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from contextual_assets.cli.main import EXIT_USAGE, main
from contextual_assets.log_format import JsonFormatter, install_log_format


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """The root logger, its handlers and their formatters put back as they were after the test."""
    logger = logging.getLogger()
    handlers, level = list(logger.handlers), logger.level
    formatters = {h: h.formatter for h in handlers}
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)
    for handler, formatter in formatters.items():
        handler.setFormatter(formatter)


def _record(**extra) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "contextual_assets.serving", "levelno": logging.WARNING,
                                  "levelname": "WARNING", "msg": "slow search: %d ms", "args": (812,),
                                  "created": 1767225600.25, **extra})


def test_a_record_is_one_json_object_with_its_extra_fields():
    line = JsonFormatter().format(_record(request_id="req-7f3a", doc_count=3, client=object()))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry == {"time": "2026-01-01T00:00:00.250+00:00", "level": "WARNING",
                     "logger": "contextual_assets.serving", "message": "slow search: 812 ms",
                     "request_id": "req-7f3a", "doc_count": 3}, "an extra that is not JSON is left out"


def test_an_exception_is_a_string_field():
    try:
        raise ValueError("bad chunk")
    except ValueError:
        record = _record(exc_info=sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert entry["exc_info"].startswith("Traceback") and "ValueError: bad chunk" in entry["exc_info"]


def test_json_twice_adds_one_handler_and_text_changes_nothing(root, capsys):
    root.handlers[:] = []  # as in a code server, before any handler (other tests may have run `ctx`)
    before: list[logging.Handler] = []
    install_log_format("text")
    assert root.handlers == before
    install_log_format("json")
    install_log_format("json")
    added = [h for h in root.handlers if h not in before]
    assert len(added) == 1 and isinstance(added[0].formatter, JsonFormatter)
    logging.getLogger("contextual_assets.test").warning("indexed %s", "a.pdf", extra={"request_id": "r-1"})
    entry = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert entry["message"] == "indexed a.pdf" and entry["request_id"] == "r-1" and entry["level"] == "WARNING"


def test_json_formats_the_clis_handler_instead_of_adding_one(root):
    handler = logging.StreamHandler(sys.stderr)
    handler.ctx_cli = True  # type: ignore[attr-defined]  (as `ctx`'s configure_logging marks it)
    text = logging.Formatter("%(levelname)s:%(name)s:%(message)s")
    handler.setFormatter(text)
    root.handlers[:] = [handler]
    install_log_format("text")
    assert handler.formatter is text, "text keeps the current format"
    install_log_format("json")
    install_log_format("json")
    assert root.handlers == [handler] and isinstance(handler.formatter, JsonFormatter)


def test_a_bad_log_format_is_the_clis_one_line_error(root, monkeypatch, capsys):
    monkeypatch.setenv("CTX_LOG_FORMAT", "xml")
    assert main(["status"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: CTX_LOG_FORMAT='xml' is not valid") and err.count("\n") == 1, err
