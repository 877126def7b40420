"""A `ChunkFilter` as SQL over `ctx_chunks` columns, in the store's portable `?` style: the same
conditions on DuckDB and Postgres, apart from reading the JSON section path (the back-end's
`json_array_holds`)."""

from __future__ import annotations

from typing import Any

from ..models import ChunkFilter
from .backend import Backend


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern matching strings that start with `prefix` literally (escape character `\\`)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def filter_sql(where: ChunkFilter | None, backend: Backend, alias: str = "") -> tuple[str, list[Any]]:
    """(" AND ..." fragment, its parameters) over the columns of `ctx_chunks` (prefixed `alias.`);
    ("", []) when there is nothing to filter."""
    if where is None or where.is_empty():
        return "", []
    col = f"{alias}." if alias else ""
    parts: list[str] = []
    params: list[Any] = []
    if where.documents:
        parts.append(f"{col}doc_id IN ({', '.join('?' for _ in where.documents)})")
        params += list(where.documents)
    if where.path_prefix:
        parts.append(f"{col}doc_id LIKE ? ESCAPE '\\'")
        params.append(_like_prefix(where.path_prefix))
    if where.section:
        parts.append(backend.json_array_holds(f"{col}section_path"))
        params.append(where.section)
    # A chunk overlaps the range; chunks without page numbers (not from a PDF) match no page range.
    if where.page_from is not None:
        parts.append(f"coalesce({col}page_end, {col}page_start) >= ?")
        params.append(where.page_from)
    if where.page_to is not None:
        parts.append(f"{col}page_start <= ?")
        params.append(where.page_to)
    return "".join(f" AND {p}" for p in parts), params
