"""The search service's logic, apart from HTTP: which version a request reads (the production alias by
default, followed live), its embedder (loaded once per embedder identity), retrieval, fusion and the
optional rerank stage. `ctx search` runs the same code in-process."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from threadpoolctl import threadpool_limits

from contextual_assets.batching import MicroBatcher
from contextual_assets.embedder_config import EmbedderCatalog
from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights
from contextual_assets.models import ChunkFilter, SearchHit
from contextual_assets.names import PRODUCTION_ALIAS
from contextual_assets.deployment import configured_deployment
from contextual_assets.rerank import Reranker, RerankError
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore, open_store
from contextual_assets.store.lexical_snapshot import LexicalSnapshot

from .api import Hit, Readiness, SearchRequest, SearchResponse, VersionInfo, VersionsResponse
from .recent import Recent
from .vectors import VersionVectors
from .version_cache import VersionCache

FALLBACK_REFRESH_S = 30.0
log = logging.getLogger(__name__)
T = TypeVar("T")


class SearchError(Exception):
    """A request the service cannot answer; `status` is the HTTP status it maps to."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class SearchService:
    def __init__(self, store: ChunkStore, embedders: EmbedderCatalog, *, weights: FusionWeights | None = None,
                 reranker: Reranker | None = None, rerank_candidates: int = 50, max_k: int = 100,
                 alias: str = PRODUCTION_ALIAS, fallback_version: Callable[[], str | None] | None = None,
                 alias_refresh_s: float = 1.0, vectors_in_memory: bool = False,
                 in_memory_max_chunks: int = 0):
        self.store, self.embedders = store, embedders
        self.weights = weights or FusionWeights()
        self.reranker, self.rerank_candidates, self.max_k = reranker, rerank_candidates, max_k
        self.alias, self.alias_refresh_s = alias, alias_refresh_s
        # A promotion or rollback is served within `alias_refresh_s`, without a restart; the settings' version
        # is computed again every FALLBACK_REFRESH_S (it loads the Dagster resources and may ask the fleet).
        self._production = Recent(lambda: store.aliases.get(alias), alias_refresh_s)
        self._fallback = Recent(fallback_version, FALLBACK_REFRESH_S) if fallback_version else None
        self._chunk_counts: dict[str, Recent[int]] = {}  # readiness probes come every few seconds
        self._records: dict[str, dict] = {}
        self._batchers: dict[str, MicroBatcher[str, list[float]]] = {}
        self._lock = threading.Lock()
        embedding_matrix = store.search.embedding_matrix
        self.vectors = (VersionVectors(embedding_matrix, store.corpus.revision)
                        if vectors_in_memory and embedding_matrix is not None else None)
        # Up to in_memory_max_chunks, a version's BM25 postings (both back-ends) and its chunk rows (DuckDB,
        # whose point reads cost ~10 ms a request; Postgres reads them by primary key) are held in memory.
        self.in_memory_max_chunks = in_memory_max_chunks
        self.postings: VersionCache[LexicalSnapshot] | None = (
            VersionCache(self._within_limit(store.search.lexical_snapshot), store.corpus.revision, "postings")
            if in_memory_max_chunks > 0 else None)
        self.rows: VersionCache[dict] | None = (
            VersionCache(self._within_limit(store.corpus.chunk_rows), store.corpus.revision, "rows")
            if in_memory_max_chunks > 0 and self.vectors is not None else None)

    # ---- which version -----------------------------------------------------------------------
    def production(self) -> str | None:
        """The alias's target, re-read at most every `alias_refresh_s`."""
        return self._production.get()

    def _fallback_version(self) -> str | None:
        """The version the current settings build (None without a fallback)."""
        return self._fallback.get() if self._fallback is not None else None

    def _chunk_count(self, version: str) -> int:
        """The version's chunks, counted again at most every `alias_refresh_s` (a count reads the version's
        rows); an empty version at every call (nothing to read), so readiness follows its first chunks at once."""
        with self._lock:
            count = self._chunk_counts.setdefault(version, Recent(
                lambda: self.store.corpus.count_chunks(version), self.alias_refresh_s, keep=lambda chunks: chunks > 0))
        return count.get()

    def default_version(self) -> str | None:
        return self.production() or self._fallback_version()

    def _record(self, version: str) -> dict:
        """The version's fingerprint and recipe; a 404 when it is unknown or holds no chunks."""
        with self._lock:
            record = self._records.get(version)
        if record is None:
            record = self.store.corpus.index_version(version)
            if record is None or self.store.corpus.count_chunks(version) == 0:
                known = ", ".join(f"{v['index_version']} ({v['chunks']} chunks)"
                                  for v in self.store.corpus.index_versions()) or "none"
                raise SearchError(404, f"index version {version} holds no chunks (known versions: {known}); "
                                       "ingest first or pass --version")
            with self._lock:
                self._records[version] = record  # a version's fingerprint and recipe never change
        return record

    def embed_query(self, version: str, query: str) -> list[float]:
        """The query embedded by the version's own embedder (its vectors mean nothing to another)."""
        record = self._record(version)
        identity = record["fingerprint"].get("embedder") or self.embedders.identity()
        with self._lock:
            batcher = self._batchers.get(identity)
        if batcher is None:
            try:
                embedder = self.embedders.for_identity(identity, (record.get("recipe") or {}).get("embedder"))
            except ConfigurationError as exc:
                raise SearchError(409, str(exc)) from None
            with self._lock:
                # Concurrent queries embedded in one forward pass (see batching.py).
                batcher = self._batchers.setdefault(identity, MicroBatcher(embedder.embed, name=f"embed-{identity}"))
        return batcher.submit(query)

    # ---- search ------------------------------------------------------------------------------
    def search(self, request: SearchRequest) -> SearchResponse:
        started = time.perf_counter()
        if request.k > self.max_k:
            raise SearchError(422, f"k={request.k} is over this service's limit of {self.max_k} (CTX_SERVE_MAX_K)")
        rerank = self.reranker is not None if request.rerank is None else request.rerank
        if rerank and self.reranker is None:
            raise SearchError(400, "rerank was asked for but no reranker is configured (set CTX_RERANK_BASE_URL "
                                   "and CTX_RERANK_MODEL, or CTX_RERANK_MODEL_DIR)")
        alias = None
        version = request.version
        if not version:
            version = self.production()
            alias = self.alias if version else None
            version = version or self._fallback_version()
            if not version:
                raise SearchError(404, f"no index version is promoted ('{self.alias}' is not set) and none is "
                                       "configured; ingest and `ctx eval`, or pass a version")
        self._record(version)
        depth = max(request.k, self.rerank_candidates) if rerank else request.k
        where = request.filter if request.filter is not None and not request.filter.is_empty() else None
        hits = self._retrieve(request.query, request.mode, version, depth, where)
        if rerank and hits:
            assert self.reranker is not None
            try:
                hits = self.reranker.rerank(request.query, hits, request.k)
            except RerankError as exc:
                raise SearchError(502, str(exc)) from None
        hits = hits[: request.k]
        return SearchResponse(
            index_version=version, alias=alias, mode=request.mode, reranked=bool(rerank and hits),
            reranker=self.reranker.identity if rerank and self.reranker else None,
            took_ms=round((time.perf_counter() - started) * 1000, 2),
            hits=[_hit(rank, h) for rank, h in enumerate(hits, start=1)])

    def _retrieve(self, query: str, mode: str, version: str, depth: int,
                  where: ChunkFilter | None) -> list[SearchHit]:
        store = self.store
        with store.reading():
            if mode == "lexical":
                return self._hits(version, self._lexical(query, version, depth, where))
            vector = self.embed_query(version, query)
            if mode == "dense":
                return self._hits(version, self._dense(vector, version, depth, where))
            return self._hits(version, store.search.hybrid_top(query, vector, version, depth,
                                                                      weights=self.weights, dense_top=self._dense,
                                                                      where=where, lexical_top=self._lexical))

    def _dense(self, vector: list[float], version: str, n: int,
               where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        # A filtered query is ranked in the store, over the rows that pass the filter (the in-memory
        # matrix holds no filter columns).
        if self.vectors is not None and where is None:
            top = self.vectors.top(version, vector, n)
            if top is not None:
                return top
        return self.store.search.dense_top(vector, version, n, where)

    def _lexical(self, query: str, version: str, n: int,
                 where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        # As for dense: a filtered query is ranked in the store (the postings in memory hold no filter
        # columns), and so is every query until the version's postings are loaded and current.
        if self.postings is not None and where is None:
            postings = self.postings.current(version)
            if postings is not None:
                return postings.top(query, n)
        return self.store.search.lexical_top(query, version, n, where)

    def _hits(self, version: str, scored: list[tuple[str, int, float]]) -> list[SearchHit]:
        rows = self.rows.current(version) if self.rows is not None else None
        return self.store.search.hits(version, scored, rows)

    def _within_limit(self, load: Callable[[str], T]) -> Callable[[str], T | None]:
        """`load` for versions of at most in_memory_max_chunks chunks; None (the store answers) above."""
        def load_within_limit(version: str) -> T | None:
            chunks = self.store.corpus.count_chunks(version)
            if chunks > self.in_memory_max_chunks:
                log.info("index version %s has %d chunks, over CTX_SERVE_IN_MEMORY_MAX_CHUNKS=%d: searched in "
                         "the store", version, chunks, self.in_memory_max_chunks)
                return None
            return load(version)
        return load_within_limit

    def in_memory(self) -> dict[str, list[str]]:
        """The versions whose vectors, postings and chunk rows are held in memory now, by part."""
        parts = {"vectors": self.vectors, "postings": self.postings, "rows": self.rows}
        return {part: cache.versions for part, cache in parts.items() if cache is not None}

    # ---- versions and health -----------------------------------------------------------------
    def versions(self) -> VersionsResponse:
        production = self.production()
        aliases = {production: [self.alias]} if production else {}
        return VersionsResponse(
            production=production, default=self.default_version(),
            versions=[VersionInfo(index_version=v["index_version"], documents=v["documents"], chunks=v["chunks"],
                                  created_at=str(v["created_at"]), embedder=v["fingerprint"].get("embedder"),
                                  aliases=aliases.get(v["index_version"], []))
                      for v in self.store.corpus.index_versions()])

    def ready(self) -> Readiness:
        """Ready: the version a search without `version` would serve holds chunks (else a 503 saying why).
        Never promoted, that is the version the current settings build: ready only once it holds chunks."""
        production = self.production()
        version = production or self._fallback_version()
        if not version:
            raise SearchError(503, f"nothing to serve: '{self.alias}' was never promoted and the current settings "
                                   "build no version; ingest and `ctx eval`")
        chunks = self._chunk_count(version)
        if chunks == 0:
            if production:
                raise SearchError(503, f"'{self.alias}' points to {version}, which holds no chunks; promote a "
                                       "version with chunks (`ctx rollback` or ingest and `ctx eval`)")
            raise SearchError(503, f"nothing to serve: '{self.alias}' was never promoted and {version} (the "
                                   "version the current settings build) holds no chunks; ingest and `ctx eval`")
        return Readiness(index_version=version, alias=self.alias if production else None, production=production,
                         default=version, chunks=chunks)


def service_from_settings(settings: PlatformSettings, *, long_lived: bool = False) -> SearchService:
    """The service the settings describe. Without a production alias it serves the version the current
    settings build (as `ctx search` does), computed only when needed (it asks the header fleet). A
    long-lived one (`ctx serve`) keeps vectors and BM25 postings in memory and its store connection open
    between requests."""
    deployment = configured_deployment(settings)
    # `ctx serve` never migrates (search replicas may run as a read-only role): a store behind or ahead of this
    # release is refused, naming `ctx migrate`. A one-off in-process `ctx search` migrates as the other commands do.
    store = open_store(settings.database_url or None, settings.duckdb_path, pool_size=8, migrate=not long_lived)
    if long_lived:
        store.backend.hold_connection()
        # Numpy's BLAS on one thread: the dense product runs beside the query embedder (one torch thread)
        # and the request threads, and OpenBLAS's extra threads spin while they wait for work. Measured
        # with 8 clients on 200,000 chunks on 2 cores: 44.5 qps against 32 (bench/README.md, *Search*).
        threadpool_limits(limits=1, user_api="blas")
    embedders = deployment.embedder.catalog_for(threads=1,
                                                runtime=settings.serve_query_runtime if long_lived else "torch")
    reranker = deployment.reranker.get()
    return SearchService(store, embedders, weights=deployment.gate.weights(), reranker=reranker,
                         rerank_candidates=deployment.reranker.candidates, max_k=settings.serve_max_k,
                         fallback_version=deployment.current_index_version, vectors_in_memory=long_lived,
                         in_memory_max_chunks=settings.serve_in_memory_max_chunks if long_lived else 0)


def _hit(rank: int, h: SearchHit) -> Hit:
    # JSON has no NaN or infinity; a score that is not finite carries no order information anyway.
    return Hit(rank=rank, score=h.score if math.isfinite(h.score) else 0.0, document=h.doc_id,
               ordinal=h.ordinal, source_doc=h.source_doc, title=h.title, section_path=h.section_path, page_start=h.page_start,
               page_end=h.page_end, header=h.header, text=h.text, index_version=h.index_version)
