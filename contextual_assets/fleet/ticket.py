"""`Ticket`: one request's current attempt, as the hedging monitor sees it.

Its own module because two sides share it: `Attempts.send` records where the primary went
(attempts.py), and `Hedging` watches it and grants a duplicate (hedging.py), which imports attempts.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .replica import ReplicaState


@dataclass
class Ticket:
    """One request's current attempt, as the hedging monitor sees it."""

    cost: int
    state: ReplicaState | None = None  # the primary's replica, once dispatched
    dispatched: float = 0.0
    hedge: asyncio.Event = field(default_factory=asyncio.Event)  # set by the monitor: send a duplicate
    hedged: bool = False
    stalled: bool = False  # the duplicate is sent because the primary's replica stalled
