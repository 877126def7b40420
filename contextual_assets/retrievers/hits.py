"""What both retrievers share: the search request they send and how a hit becomes a framework's
document (its text, a stable id and metadata). Imports only the search client and its API models."""

from __future__ import annotations

from typing import Any

from contextual_assets.models import ChunkFilter
from contextual_assets.serving.api import Hit, SearchMode, SearchRequest


def search_request(query: str, *, k: int, mode: SearchMode, version: str | None, filter: ChunkFilter | dict | None,
                   rerank: bool | None) -> SearchRequest:
    where = ChunkFilter.model_validate(filter) if isinstance(filter, dict) else filter
    return SearchRequest(query=query, k=k, mode=mode, version=version, rerank=rerank, filter=where)


def hit_text(hit: Hit, include_header: bool) -> str:
    """The chunk as the index embedded it: its situating header, then its text."""
    return f"{hit.header}\n\n{hit.text}" if include_header and hit.header else hit.text


def hit_id(hit: Hit) -> str:
    """Stable across searches of one index version: the document key and the chunk's position."""
    return f"{hit.index_version}:{hit.document}#{hit.ordinal if hit.ordinal is not None else hit.rank}"


def hit_metadata(hit: Hit) -> dict[str, Any]:
    return {"document": hit.document, "ordinal": hit.ordinal, "source_doc": hit.source_doc, "title": hit.title,
            "section_path": list(hit.section_path), "page_start": hit.page_start, "page_end": hit.page_end,
            "header": hit.header, "score": hit.score, "rank": hit.rank, "index_version": hit.index_version}

