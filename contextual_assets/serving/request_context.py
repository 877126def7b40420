"""What every request of the search service gets, matched to a route or not: its request id (taken from
`X-Request-ID` when sane, else made) echoed on the response, one access-log line, its count and time in
the metrics, and an unforeseen exception answered as a 500 problem."""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass

from ctx_search_client.errors import REQUEST_ID_HEADER
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .metrics import ServiceMetrics
from .problems import problem_response

ACCESS_LOG = logging.getLogger("ctx.serve.access")
UNMATCHED_ROUTE = "unmatched"  # the metrics' route label of a path or method no route takes (404, 405)
_SANE_ID = re.compile(r"[A-Za-z0-9._:~+/=-]{1,128}")
_CONTEXT_KEY = "ctx.request"
log = logging.getLogger(__name__)


@dataclass
class RequestContext:
    """One request's id, and the route that took it (set by the route's handler)."""

    request_id: str
    route: str = UNMATCHED_ROUTE


def request_id_from(value: str | None) -> str:
    """`value` when it is a sane id (1 to 128 of letters, digits and `._:~+/=-`), else a new one."""
    if value and _SANE_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


def context(request: Request) -> RequestContext:
    """The request's context (a request that did not come through the middleware gets a fresh one)."""
    found = request.scope.get(_CONTEXT_KEY)
    if found is None:
        found = request.scope[_CONTEXT_KEY] = RequestContext(request_id_from(None))
    return found


class RequestMiddleware:
    """The ASGI middleware doing the above, around the whole app (routing and its 404 and 405 included)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        ctx = RequestContext(request_id_from(request.headers.get(REQUEST_ID_HEADER)))
        scope[_CONTEXT_KEY] = ctx
        started, status, answered = time.perf_counter(), 500, False

        async def send_with_id(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", ctx.request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:  # unforeseen: a 500 problem (the traceback in the log, under the request id)
            if answered:  # too late for another answer: the server closes the connection
                raise
            log.exception("request %s failed (%s %s)", ctx.request_id, request.method, request.url.path)
            status = 500
            response = problem_response(500, "an unforeseen failure; the service log has the traceback under "
                                             f"request id {ctx.request_id}", ctx.request_id)
            await response(scope, receive, send_with_id)
        finally:
            self._observe(request, ctx, status, time.perf_counter() - started)

    def _observe(self, request: Request, ctx: RequestContext, status: int, seconds: float) -> None:
        """Count and time the request under its route, and write its access-log line (never a header)."""
        self.metrics.observe(ctx.route, status, seconds)
        client = request.client.host if request.client else "-"
        ACCESS_LOG.info('%s "%s %s" %d %.1f ms request_id=%s', client, request.method, request.url.path, status,
                        seconds * 1000, ctx.request_id, extra={"request_id": ctx.request_id})
