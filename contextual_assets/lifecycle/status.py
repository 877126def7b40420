"""Where a deployment stands (`ctx status`): the store, the settings' current index version, production
and what it lags behind, every version with its coverage, the candidate, the header fleet's health,
production's alias history with the versions a rollback can return to, the documents kept for a rollback,
and the inbox removals held back for a confirmation."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from contextual_assets.errors import ContextualError
from contextual_assets.fleet.health import fleet_health
from contextual_assets.ingest.inbox.listing import open_inbox
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.parsing.objects import is_object_url, local_location
from contextual_assets.deployment import Deployment

from .coverage import VersionCoverage, coverage_of, live_documents, production_lag


class DeploymentStatus(BaseModel):
    """`ctx status --json` is `model_dump()`: the fields in this order (`lag` is not part of it)."""

    store: str
    schema_version: int
    inbox: str
    header_source: str
    header_warning: str | None
    current_index_version: str | None
    production: str | None
    # The candidate: what the current settings build, while it is not what production serves.
    candidate: dict[str, Any] | None
    sources: int
    # What production misses of the registered documents (ingest keeps it fresh while it can).
    production_lag: dict[str, Any] | None
    index_versions: list[dict[str, Any]]
    fleet: list[dict[str, Any]] | None
    # Every change of production, oldest first, and the versions `ctx rollback` can return to, nearest first
    # (the first is where a plain `ctx rollback` goes; `--to` takes any of them).
    alias_history: list[dict[str, Any]] = Field(default_factory=list)
    rollback_targets: list[str] = Field(default_factory=list)
    # Version -> documents whose file is gone that it still holds, because production can roll back to it.
    retained: dict[str, list[str]] = Field(default_factory=dict)
    # Removals the inbox sensor holds back until `ctx inbox confirm-removals` (too many at once).
    held_removals: list[dict[str, Any]] = Field(default_factory=list)
    lag: VersionCoverage | None = Field(default=None, exclude=True)  # production_lag, with its summary


def deployment_status(deployment: Deployment) -> DeploymentStatus:
    """The status of the configured `deployment`. Opening the store is the first thing it does
    (a database that is down raises); a header fleet that is down leaves the current version unknown,
    with a warning, since the rest still helps."""
    store = deployment.store
    source, warning = deployment.headers.resolved_source()
    try:
        current = deployment.current_index_version()
    except ContextualError as exc:  # e.g. the fleet is down
        current, warning = None, f"current index version unknown: {exc}"
    production = store.aliases.get(PRODUCTION_ALIAS)
    live = live_documents(store, production)
    versions = store.corpus.index_versions()
    for version in versions:
        version["coverage"] = coverage_of(store, version["index_version"], live).metadata()
    lag = production_lag(store)
    candidate = None
    if current is not None and current != production:
        candidate = {"index_version": current, "coverage": coverage_of(store, current, live).metadata()}
    inbox = deployment.inbox.inbox
    return DeploymentStatus(
        store=store.location,
        schema_version=store.schema_version(),
        inbox=inbox if is_object_url(inbox) else os.path.abspath(local_location(inbox)),
        header_source=source,
        header_warning=warning,
        current_index_version=current,
        production=production,
        candidate=candidate,
        sources=len(store.corpus.list_sources()),
        production_lag=lag.metadata() | {"index_version": lag.index_version} if lag is not None else None,
        index_versions=versions,
        fleet=fleet_health(deployment.headers) if source == "openai" else None,
        alias_history=store.aliases.history(PRODUCTION_ALIAS),
        rollback_targets=store.aliases.rollback_targets(PRODUCTION_ALIAS),
        retained=store.corpus.retained(),
        held_removals=[h.model_dump() for h in store.inbox_state.held_removals(open_inbox(inbox).location).values()],
        lag=lag,
    )
