"""What goes into and comes out of the header fleet: `FleetRequest`, `FleetResult`, the errors an
attempt ends with, and `FleetCounters`, the one counter structure for fleet requests.

Plain data with no event loop or network dependency, so callers (the header source, benches) can
build requests and read counters without importing the pool's machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..errors import HeaderGenerationError
from .prefix import prefix_blocks


class RetryableFleetError(HeaderGenerationError):
    """A failed attempt worth retrying (elsewhere)."""


class InvalidAnswerError(RetryableFleetError):
    """The replica answered, but the answer failed validation."""


class FleetUnavailableError(HeaderGenerationError):
    """No replica could take the request within the configured time."""


class RequestTooLargeError(HeaderGenerationError):
    """The replica refused the request as over its context length: retrying cannot help."""


class RequestRejectedError(HeaderGenerationError):
    """The replica rejected the request itself (HTTP 400): retrying cannot help."""


@dataclass
class FleetRequest:
    messages: list[dict[str, str]]
    est_prompt_tokens: int
    max_tokens: int
    label: str  # e.g. "<doc>#<ordinal>", for error messages
    validate: Callable[[str], Any] | None = None  # raises to reject an answer (retried)
    extra_body: dict[str, Any] | None = None

    @property
    def cost(self) -> int:
        """Tokens the request may hold on a replica: what routing and slot accounting weigh."""
        return self.est_prompt_tokens + self.max_tokens

    @cached_property
    def prefix(self) -> tuple[int, ...]:
        """The prompt's block hashes (`prefix.prefix_blocks`): what cache-aware routing matches."""
        return prefix_blocks(self.messages)


@dataclass
class FleetResult:
    value: Any
    raw: str
    replica: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    failovers: int
    hedged: bool = False  # a duplicate was sent for this request
    hedge_won: bool = False  # and its answer is this one


@dataclass
class FleetCounters:
    """Requests sent and how they went. The pool keeps one for its whole life, counted as attempts
    happen; a caller that shares the pool with others (the header source, per document) keeps its own,
    summed from its results with `add`.

    `invalid` and `errors` are counted only where attempts happen (the pool): a result reports the
    attempt that succeeded, not the rejected answers or failures before it.
    """

    sent: int = 0
    retries: int = 0
    failovers: int = 0
    invalid: int = 0
    hedges: int = 0  # duplicates sent
    hedge_wins: int = 0  # duplicates whose answer was used (the other request was cancelled)
    errors: dict[str, int] = field(default_factory=dict)

    def count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def add(self, result: FleetResult) -> None:
        """Count what one answered request reports about itself."""
        self.sent += result.attempts
        self.retries += result.attempts - 1
        self.failovers += result.failovers
        self.hedges += result.hedged
        self.hedge_wins += result.hedge_won
