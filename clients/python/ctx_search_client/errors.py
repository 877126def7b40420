"""The client's errors, and how a refusal of the service becomes one: RFC 9457 problem details
(`application/problem+json`) from current servers, `{"error": "..."}` from older ones, or whatever a
proxy in between answered (an HTML page), always as a one-line message."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import httpx
from pydantic import ValidationError

from .models import LegacyErrorBody, ProblemDetails

REQUEST_ID_HEADER = "X-Request-ID"
PROBLEM_MEDIA_TYPE = "application/problem+json"
_MAX_DETAIL_CHARS = 300


class SearchServiceError(Exception):
    """The search service refused the request, answered something this client cannot read, or could not
    be reached. `status` is the HTTP status (None when nothing was answered); `title`, `detail`, `type`
    and `request_id` come from the problem details (or the older `{"error": ...}` body, as `detail`);
    `retry_after_s` is the response's `Retry-After` (a 429 or 503), never acted on by the client."""

    def __init__(self, message: str, *, status: int | None = None, title: str | None = None,
                 detail: str | None = None, type: str | None = None, request_id: str | None = None,
                 retry_after_s: float | None = None):
        super().__init__(one_line(message))
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.request_id = request_id
        self.retry_after_s = retry_after_s


class SearchServiceUnavailable(SearchServiceError):
    """The search service does not answer (connection refused, timeout, DNS): nothing is wrong with the
    request, it may pass once the service is back."""


class SearchRateLimited(SearchServiceError):
    """A 429: the service asks to wait `retry_after_s` seconds (None when it did not say)."""


def one_line(text: str, limit: int | None = None) -> str:
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` in seconds: delta-seconds or an HTTP date (RFC 9110 10.2.3); None when absent or invalid."""
    if not value or not value.strip():
        return None
    value = value.strip()
    if value.isdecimal():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, float(math.ceil(seconds)))


def _body_fields(response: httpx.Response) -> dict[str, str | int | None]:
    """title, detail, type, request_id from either body form; the raw text as detail when neither."""
    try:
        body = response.json()
    except ValueError:
        return {"detail": one_line(response.text, _MAX_DETAIL_CHARS) or None}
    if isinstance(body, dict) and "error" in body and not {"type", "title", "detail"} & body.keys():
        try:
            return {"detail": one_line(LegacyErrorBody.model_validate(body).error, _MAX_DETAIL_CHARS)}
        except ValidationError:
            pass
    is_problem = response.headers.get("content-type", "").split(";")[0].strip() == PROBLEM_MEDIA_TYPE
    if isinstance(body, dict) and (is_problem or {"type", "title", "detail"} & body.keys()):
        try:
            problem = ProblemDetails.model_validate(body)
        except ValidationError:
            pass
        else:
            return {"title": problem.title, "detail": one_line(problem.detail or "", _MAX_DETAIL_CHARS) or None,
                    "type": problem.type, "request_id": problem.request_id, "status": problem.status}
    return {"detail": one_line(response.text, _MAX_DETAIL_CHARS) or None}


def error_from_response(response: httpx.Response, base_url: str) -> SearchServiceError:
    """The error a non-2xx answer means, with a one-line message naming the service, the status, the
    title, the detail, the request id and how long to wait when the service said so."""
    fields = _body_fields(response)
    status = response.status_code
    title = fields.get("title") or httpx.codes.get_reason_phrase(status) or None
    detail = fields.get("detail")
    request_id = fields.get("request_id") or response.headers.get(REQUEST_ID_HEADER) or None
    retry_after_s = retry_after_seconds(response.headers.get("Retry-After"))
    message = f"search service at {base_url} answered {status}" + (f" {title}" if title else "")
    message += f": {detail}" if detail else ""
    notes = ([f"request {request_id}"] if request_id else []) + \
        ([f"retry after {retry_after_s:g} s"] if retry_after_s is not None else [])
    message += f" ({'; '.join(notes)})" if notes else ""
    kind = SearchRateLimited if status == 429 else SearchServiceError
    return kind(message, status=status, title=str(title) if title else None, detail=str(detail) if detail else None,
                type=str(fields["type"]) if fields.get("type") else None,
                request_id=str(request_id) if request_id else None, retry_after_s=retry_after_s)
