"""A request from submission to its answer: attempts retried with jittered exponential backoff
(tenacity) on a replica not yet tried for that request, within a fleet-wide retry budget.

Only `RetryableFleetError` is retried; a request no replica will take, or a fleet down for longer
than `unavailable_timeout_s`, fails at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from ..errors import HeaderGenerationError
from .config import FleetConfig
from .slots import Slots
from .types import FleetCounters, FleetRequest, FleetResult, RetryableFleetError

# One attempt of a request: (request, replicas tried so far, attempt number) -> its answer.
Attempt = Callable[[FleetRequest, set[str], int], Awaitable[FleetResult]]


def _gave_up(message: str, attempts: int) -> HeaderGenerationError:
    """The request's failure, with the requests it cost (a run reports them beside the answered ones)."""
    error = HeaderGenerationError(message)
    error.attempts = attempts
    return error


def retry_allowed(config: FleetConfig, counters: FleetCounters) -> bool:
    budget = max(config.retry_budget_min, int(config.retry_budget_ratio * counters.sent))
    return counters.retries < budget


async def complete(request: FleetRequest, send: Attempt, *, config: FleetConfig, counters: FleetCounters,
                   slots: Slots) -> FleetResult:
    tried: set[str] = set()
    errors: list[str] = []
    attempt_no = 0

    def before_sleep(retry_state) -> None:
        slots.update_down()
        slots.raise_if_down(request.label)
        if not retry_allowed(config, counters):
            raise _gave_up(f"{request.label}: fleet retry budget exhausted after {counters.retries} retries "
                           f"(last errors: {' | '.join(errors[-3:])})", attempt_no)
        counters.retries += 1

    retrying = AsyncRetrying(
        stop=stop_after_attempt(config.max_attempts),
        wait=wait_random_exponential(multiplier=0.1, max=5.0),
        retry=retry_if_exception_type(RetryableFleetError),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                attempt_no += 1
                try:
                    result = await send(request, tried, attempt_no)
                except RetryableFleetError as exc:
                    errors.append(str(exc))
                    raise
                result.failovers = max(0, len(tried) - 1 - int(result.hedged))
                return result
    except RetryableFleetError:
        raise _gave_up(f"{request.label}: no valid answer after {attempt_no} attempts: {' | '.join(errors[-3:])}",
                       attempt_no) from None
    raise HeaderGenerationError(f"{request.label}: no answer")  # pragma: no cover - loop always returns
