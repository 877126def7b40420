"""Which live documents an index version holds at their current revision.

Live documents are the registered sources (the inbox and `ctx ingest`) and, for a candidate, whatever
production holds: a candidate that misses one cannot be promoted, and production that misses one
lags (its freshness check warns)."""

from __future__ import annotations

import os

from pydantic import BaseModel

from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.store import ChunkStore

LIST_LIMIT = 50  # ids listed in messages and metadata; counts are always complete


class VersionCoverage(BaseModel):
    index_version: str
    live: int  # documents the version should hold
    covered: int  # held at the live revision
    missing: list[str]  # not held at all
    outdated: list[str]  # held at an older revision than the registered file

    @property
    def share(self) -> float:
        return self.covered / self.live if self.live else 1.0

    @property
    def complete(self) -> bool:
        return not self.missing and not self.outdated

    def summary(self, role: str = "candidate") -> str:
        """`candidate covers 61 of 90 live documents; 3 are at an older revision`."""
        text = f"{role} {self.index_version} covers {self.covered} of {self.live} live documents"
        if self.missing:
            text += f"; {len(self.missing)} missing ({_ids(self.missing)})"
        if self.outdated:
            text += f"; {len(self.outdated)} at an older revision ({_ids(self.outdated)})"
        return text

    def metadata(self) -> dict[str, object]:
        return {"live": self.live, "covered": self.covered, "share": round(self.share, 4),
                "missing": len(self.missing), "outdated": len(self.outdated),
                "missing_ids": self.missing[:LIST_LIMIT], "outdated_ids": self.outdated[:LIST_LIMIT]}


def _ids(ids: list[str], limit: int = 5) -> str:
    return ", ".join(ids[:limit]) + (f", and {len(ids) - limit} more" if len(ids) > limit else "")


def live_documents(store: ChunkStore, production: str | None = None) -> dict[str, str | None]:
    """doc_id -> the revision (file hash) a version must hold: registered sources whose file still
    exists, plus production's documents that were never registered (a candidate may not silently
    drop them either). A registered file that is gone is no longer live, nor is a document whose file was
    removed and that production holds only because a rollback returned to a version that kept it."""
    sources = store.corpus.list_sources()
    live: dict[str, str | None] = {s.doc_id: s.file_hash for s in sources if _exists(s.path)}
    if production:
        registered = {s.doc_id for s in sources}
        kept = {doc_id for doc_ids in store.corpus.retained().values() for doc_id in doc_ids}
        for document in store.corpus.documents(production):
            if document.doc_id not in registered and document.doc_id not in kept:
                live.setdefault(document.doc_id, document.file_hash)
    return live


def _exists(path: str) -> bool:
    return "://" in path or os.path.lexists(path)  # a URI source is live while registered


def coverage_of(store: ChunkStore, index_version: str, live: dict[str, str | None]) -> VersionCoverage:
    held = {d.doc_id: d.file_hash for d in store.corpus.documents(index_version)}
    missing = sorted(doc for doc in live if doc not in held)
    outdated = sorted(doc for doc, revision in live.items()
                      if doc in held and revision and held[doc] != revision)
    return VersionCoverage(index_version=index_version, live=len(live),
                           covered=len(live) - len(missing) - len(outdated), missing=missing, outdated=outdated)


def production_lag(store: ChunkStore, alias: str = PRODUCTION_ALIAS) -> VersionCoverage | None:
    """What the promoted version misses of the registered sources (None: nothing promoted yet)."""
    production = store.aliases.get(alias)
    if production is None:
        return None
    return coverage_of(store, production, live_documents(store))
