"""The log format on stderr (`CTX_LOG_FORMAT`): `text`, plain lines as the handler formats them; `json`, one
JSON object a line for log shippers (time, level, logger, message, the request id and other `extra` fields).

It covers the platform's loggers and whatever else propagates to Python's root logger. Dagster's run logs
(the event log the UI shows, and the `dagster` logger's console output) keep Dagster's own format; its
processes take their own `--log-format json` flag (`dagster code-server start`, `dagster api grpc`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from contextual_assets.settings import LOG_FORMATS

# A LogRecord's own attributes: anything else on a record came from `extra=`.
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _RECORD_FIELDS or key in entry or key.startswith("_"):
                continue
            if _serialisable(value):
                entry[key] = value  # request_id and the other `extra` fields
        if record.exc_info:
            entry["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


def _serialisable(value: Any) -> bool:
    """Whether `json.dumps` takes `value` as it is."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _stderr_handlers(root: logging.Logger) -> list[logging.Handler]:
    """The root logger's handlers that write to stderr (the CLI's, or one this module added)."""
    return [h for h in root.handlers
            if getattr(h, "ctx_log_format", False) or getattr(h, "ctx_cli", False)
            or (type(h) is logging.StreamHandler and h.stream in (sys.stderr, sys.__stderr__))]


def install_log_format(fmt: str) -> None:
    """Format the root logger's stderr handler as `fmt` says. `json`: a `JsonFormatter` on it (a handler
    is added when there is none, once however often this is called); `text`: the current format stays."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {LOG_FORMATS}")
    if fmt == "text":
        return
    root = logging.getLogger()
    handlers = _stderr_handlers(root)
    if not handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.ctx_log_format = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        handlers = [handler]
    for handler in handlers:
        if not isinstance(handler.formatter, JsonFormatter):
            handler.setFormatter(JsonFormatter())
