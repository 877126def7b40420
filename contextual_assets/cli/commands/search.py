"""`ctx search`: through the search service at CTX_SEARCH_URL when set (this process then loads neither
torch nor Dagster, nor the store), else in this process."""

from __future__ import annotations

import argparse
import json
import sys

from pydantic import ValidationError

from contextual_assets.cli.main import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from contextual_assets.models import MAX_PAGE, ChunkFilter
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.serving.api import SearchRequest, SearchResponse
from contextual_assets.serving.client import (
    SearchClient,
    SearchServiceError,
    SearchServiceUnavailable,
    token_from_env,
)
from contextual_assets.settings import PlatformSettings

# Search answers that mean the request or the settings must change (exit 2), not that nothing was found.
_USAGE_STATUSES = (400, 401, 403, 413, 422)
# Search answers from a service that is up while what it needs is not (e.g. the reranker).
_UNAVAILABLE_STATUSES = (502, 503, 504)
# The option that sets each request field, for messages about an invalid value.
_OPTIONS = {"k": "-k", "query": "the query", "documents": "--document", "path_prefix": "--path-prefix",
            "section": "--section", "page_from": "--pages", "page_to": "--pages"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="the question or keywords to search for")
    parser.add_argument("-k", type=int, default=5, help="how many hits to show (default: 5)")
    parser.add_argument("--mode", choices=["hybrid", "dense", "lexical"], default="hybrid",
                        help="dense + lexical fused by reciprocal rank (default), or one of them")
    parser.add_argument("--version", default="", help=f"index version (default: the '{PRODUCTION_ALIAS}' alias, "
                        "else the one current settings build)")
    parser.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None,
                        help="rerank the fused candidates (default: on when CTX_RERANK_BASE_URL or "
                             "CTX_RERANK_MODEL_DIR is set)")
    filters = parser.add_argument_group("filters (applied before the top k; combined with AND)")
    filters.add_argument("--document", action="append", default=None, metavar="KEY",
                         help="only this document key (a hit's document); repeat for several")
    filters.add_argument("--path-prefix", default=None, metavar="PREFIX",
                         help="only documents whose key starts with this, e.g. contracts/")
    filters.add_argument("--section", default=None, metavar="HEADING",
                         help="only chunks under this heading (exact, at any depth of the section path)")
    filters.add_argument("--pages", default=None, metavar="FROM-TO",
                         help="only chunks on these pages, e.g. 3-7, 3- or -7 (PDF documents)")
    parser.add_argument("--json", action="store_true",
                        help="print the whole answer as JSON (index_version, alias, mode, reranked, took_ms, hits)")


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    try:
        request = SearchRequest(query=args.query, k=args.k, mode=args.mode, version=args.version or None,
                                rerank=args.rerank, filter=_filter(args))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = next((str(p) for p in first["loc"] if p != "filter"), "")
        where = _OPTIONS.get(field, field)
        print(f"error: {where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a --pages that is not a page range
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    response = _search_remote(settings, request) if settings.search_url else _search_here(settings, request)
    if isinstance(response, int):
        return response
    if args.json:  # the service's answer as it gives it: what a script needs beside the hits
        print(json.dumps(response.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return EXIT_OK
    hits = response.hits
    for h in hits:
        pages = f" p.{h.page_start}" + (f"-{h.page_end}" if h.page_end and h.page_end != h.page_start else "") \
            if h.page_start else ""
        section = " > ".join(h.section_path) or "-"
        print(f"{h.rank:2d}. [{h.score:.4f}] {h.document}{pages} :: {section}")
        if h.header:
            print(f"    header: {h.header}")
        snippet = " ".join(h.text.split())
        print(f"    {snippet[:240]}{'...' if len(snippet) > 240 else ''}")
    if not hits:
        print("no results", file=sys.stderr)
    return EXIT_OK


def _filter(args: argparse.Namespace) -> ChunkFilter | None:
    page_from, page_to = _page_range(args.pages) if args.pages is not None else (None, None)
    where = ChunkFilter(documents=args.document, path_prefix=args.path_prefix, section=args.section,
                        page_from=page_from, page_to=page_to)
    return None if where.is_empty() else where


def _page_range(text: str) -> tuple[int | None, int | None]:
    """`--pages` FROM-TO, FROM- or -TO as (page_from, page_to); a ValueError naming the option otherwise."""
    start, dash, end = (part.strip() for part in text.partition("-"))
    if not dash or not (start or end) or not all(p.isdecimal() for p in (start, end) if p):
        raise ValueError(f"--pages {text!r}: give FROM-TO, FROM- or -TO with page numbers, e.g. 3-7")
    # The length first: int() refuses over 4300 digits, and no page needs more digits than MAX_PAGE.
    if any(p and (len(p) > len(str(MAX_PAGE)) or not 1 <= int(p) <= MAX_PAGE) for p in (start, end)):
        raise ValueError(f"--pages {text!r}: page numbers run from 1 to {MAX_PAGE}")
    page_from, page_to = (int(p) if p else None for p in (start, end))
    if page_from is not None and page_to is not None and page_from > page_to:
        raise ValueError(f"--pages {text!r}: {page_from} is after {page_to}; give FROM-TO with FROM <= TO")
    return page_from, page_to


def _search_remote(settings: PlatformSettings, request: SearchRequest) -> SearchResponse | int:
    """The running service's answer, or the exit code of its refusal (said on stderr)."""
    try:
        client = SearchClient(settings.search_url, token_from_env(settings.search_token_env))
        return client.search(request)
    except SearchServiceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except SearchServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return search_exit(exc.status)


def _search_here(settings: PlatformSettings, request: SearchRequest) -> SearchResponse | int:
    """The answer of a search service built in this process, or the exit code of its refusal."""
    # Imported here, not at the top: it loads the store (DuckDB, numpy), which a search through a
    # running service (`_search_remote`) never needs.
    from contextual_assets.serving.service import SearchError, service_from_settings

    service = service_from_settings(settings)
    try:
        return service.search(request)
    except SearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return search_exit(exc.status)
    finally:
        service.store.close()


def search_exit(status: int | None) -> int:
    """A refused search's exit code: no status (a bad URL or token) or a request/setting to change: 2; a
    dependency of the service down: 3; anything else (e.g. no such version): 1."""
    if status is None or status in _USAGE_STATUSES:
        return EXIT_USAGE
    return EXIT_UNAVAILABLE if status in _UNAVAILABLE_STATUSES else EXIT_FAILED
