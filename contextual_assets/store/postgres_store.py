"""Postgres + pgvector back-end (production). Dense search uses an HNSW index per embedding
dimension (an expression index over `embedding::vector(N)`), so index versions built with
different embedders live side by side."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from ..errors import StoreError, StoreUnavailable
from ..models import ChunkFilter, EmbeddedChunk
from .backend import Backend, utc_now
from .filters import filter_sql
from .lexical_index import postings_rows
from .migrations import MIGRATIONS
from .storage import ChunkStore

_MIGRATION_LOCK = 7_314_159  # advisory lock id: one migrator at a time


def redact_url(url: str) -> str:
    """Connection string without its password (URL or key=value form), for messages and metadata."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # unparsable: show nothing of it rather than risk a secret
        return "postgres (unparsable connection string)"
    shown = {k: v for k, v in parts.items() if k in ("host", "port", "dbname", "user") and v}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "postgres"


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


class PostgresBackend(Backend):
    dialect = "postgres"

    # hnsw.ef_search for a top-10 query: bench.load measured recall@10 against exact search on 200,000
    # clustered 384-dim vectors at 0.903 with pgvector's 40, 0.954 at 100 and 0.974 at 200 (p50 8 ms).
    DEFAULT_EF_SEARCH = 200

    def __init__(self, url: str, pool_size: int = 4, ef_search: int = DEFAULT_EF_SEARCH):
        self.url = url
        self.ef_search = int(ef_search)
        self.location = f"postgres:{redact_url(url)}"
        try:
            # One direct attempt first: a refused or unknown host fails now, where the pool would retry
            # in the background for its whole timeout before saying so.
            import psycopg

            psycopg.connect(url, connect_timeout=10).close()
            self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True, timeout=30,
                                        kwargs={"autocommit": True})
            self._pool.wait(timeout=30)
        except Exception as exc:
            raise StoreUnavailable(f"cannot connect to Postgres at {redact_url(url)}: {type(exc).__name__}; start "
                                   "the database or fix DATABASE_URL") from None
        self._indexed_dims: set[int] = set()
        self._server_ef_search: int | None = None

    def close(self) -> None:
        self._pool.close()

    def sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def apply_migrations(self, upto: int | None = None) -> tuple[int, list[int]]:
        with self._pool.connection() as conn:
            now: list[int] = []
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))  # one migrator at a time
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS ctx_schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)"
                )
                applied = {r[0] for r in conn.execute("SELECT version FROM ctx_schema_migrations").fetchall()}
                for version, statements in MIGRATIONS["postgres"]:
                    if version in applied or (upto is not None and version > upto):
                        continue
                    for statement in statements:
                        conn.execute(statement)
                    conn.execute("INSERT INTO ctx_schema_migrations VALUES (%s, %s)", (version, utc_now()))
                    now.append(version)
            return int(conn.execute("SELECT coalesce(max(version), 0) FROM ctx_schema_migrations").fetchone()[0]), now

    def applied_migrations(self) -> list[int]:
        """As the base, but finds the table whatever the role may read (`to_regclass`), so a role without
        SELECT on it is told so rather than that the store was never migrated."""
        import psycopg

        with self._pool.connection() as conn:
            if conn.execute("SELECT to_regclass('ctx_schema_migrations')").fetchone()[0] is None:
                return []
            try:
                rows = conn.execute("SELECT version FROM ctx_schema_migrations ORDER BY version").fetchall()
            except psycopg.errors.InsufficientPrivilege:
                raise StoreError(f"the role in DATABASE_URL ({self.location}) may not read the store's tables: grant "
                                 "it SELECT on them (docs/upgrading.md)") from None
        return [int(r[0]) for r in rows]

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._pool.connection() as conn:
            with conn.transaction():
                with conn.cursor() as cur:
                    yield cur

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._pool.connection() as conn:
            return conn.execute(self.sql(sql), list(params)).fetchall()

    def read_columns(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[np.ndarray]]:
        out = []
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot for all of them
            for number, (sql, params) in enumerate(statements):
                # A server-side cursor, read in batches: no list of every row at once.
                with conn.cursor(name=f"ctx_read_columns_{number}") as cur:
                    cur.execute(self.sql(sql), list(params))
                    batches: list[list[np.ndarray]] = []
                    while rows := cur.fetchmany(100_000):
                        batches.append([np.asarray(column) for column in zip(*rows)])
                    width = len(cur.description or ())
                out.append([np.concatenate([b[i] for b in batches]) if batches else np.asarray([])
                            for i in range(width)])
        return out

    def lock_aliases(self, cur) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK - 1,))

    def prepare_vectors(self, dims: set[int]) -> None:
        """An HNSW index per embedding dimension, created before the first commit of that dimension."""
        for dim in dims:
            self._ensure_hnsw(dim)

    def _ensure_hnsw(self, dim: int) -> None:
        if dim in self._indexed_dims:
            return
        with self._pool.connection() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK + dim,))
                conn.execute(
                    f"CREATE INDEX IF NOT EXISTS ctx_chunks_hnsw_{int(dim)} ON ctx_chunks USING hnsw "
                    f"((embedding::vector({int(dim)})) vector_cosine_ops) WHERE embedding_dim = {int(dim)}"
                )
        self._indexed_dims.add(dim)

    def insert_chunks(self, cursor: Any, chunks: list[EmbeddedChunk], index_version: str) -> None:
        if not chunks:
            return
        with cursor.copy(
            "COPY ctx_chunks (index_version, doc_id, ordinal, source_doc, title, section_path, page_start, page_end, "
            "text, token_count, content_hash, external_id, header, header_source, header_model, embedding, "
            "embedding_dim) FROM STDIN"
        ) as copy:
            for c in chunks:
                copy.write_row((
                    index_version, c.doc_id, c.ordinal, c.source_doc, c.title,
                    json.dumps(c.section_path, ensure_ascii=False), c.page_start, c.page_end, c.text, c.token_count,
                    c.content_hash, c.external_id, c.header, c.header_source, c.header_model,
                    _vector_literal(c.embedding), len(c.embedding),
                ))

    def embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]:
        rows = self.query(
            "SELECT doc_id, ordinal, embedding::text FROM ctx_chunks WHERE index_version = ?", (index_version,)
        )
        return [(r[0], int(r[1]), json.loads(r[2]) if r[2] else None) for r in rows]

    def ef_search_for(self, k: int) -> int:
        """HNSW candidate list for a top-k query: at least `ef_search` and at least what the server is
        configured with (an operator's `ALTER DATABASE ... SET hnsw.ef_search = 800`, or
        `options=-c hnsw.ef_search=800` in DATABASE_URL: more recall for a few ms), 4k for wide (hybrid)
        queries; pgvector accepts at most 1000."""
        return max(1, min(1000, max(self.ef_search, self._server_ef_search or 0, k * 4)))

    def _read_server_ef_search(self, conn: Any) -> None:
        """The session's own hnsw.ef_search, read once (None, so 0, while unset and pgvector not loaded)."""
        if self._server_ef_search is None:
            value = conn.execute("SELECT current_setting('hnsw.ef_search', true)").fetchone()[0]
            self._server_ef_search = int(value) if value and str(value).isdigit() else 0

    def json_array_holds(self, column: str) -> str:
        return f"({column})::jsonb @> jsonb_build_array(CAST(? AS TEXT))"

    def dense_top(self, vector: Sequence[float], index_version: str, n: int,
                  where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        dim = len(vector)
        literal = _vector_literal(vector)
        condition, params = filter_sql(where, self)
        sql = self.sql(
            f"SELECT doc_id, ordinal, 1 - (embedding::vector({dim}) <=> ?::vector({dim})) AS score "
            f"FROM ctx_chunks WHERE embedding_dim = {dim} AND index_version = ?{condition} "
            f"ORDER BY embedding::vector({dim}) <=> ?::vector({dim}) LIMIT ?"
        )
        with self._pool.connection() as conn:
            with conn.transaction():
                # Filtering (by index version, and by `where`) after the HNSW walk can leave fewer than
                # n rows; a wider candidate list keeps recall, and an exact scan of the rows that pass
                # the filter is the fallback (pgvector 0.6 has no iterative index scan).
                self._read_server_ef_search(conn)
                conn.execute(f"SET LOCAL hnsw.ef_search = {self.ef_search_for(n)}")
                rows = conn.execute(sql, (literal, index_version, *params, literal, n)).fetchall()
                if len(rows) < n:
                    total = conn.execute(
                        self.sql("SELECT count(*) FROM ctx_chunks WHERE index_version = ? AND embedding_dim = ?"
                                 f"{condition}"),
                        (index_version, dim, *params),
                    ).fetchone()[0]
                    if len(rows) < min(n, total):
                        conn.execute("SET LOCAL enable_indexscan = off")
                        rows = conn.execute(sql, (literal, index_version, *params, literal, n)).fetchall()
        if not rows and self.query("SELECT count(*) FROM ctx_chunks WHERE index_version = ? AND embedding_dim <> ?",
                                   (index_version, dim))[0][0]:
            raise StoreError(
                f"query vector has {dim} dimensions but index version {index_version} holds no {dim}-dimensional "
                "embeddings (embedder mismatch)"
            )
        # A zero vector has no direction: pgvector's cosine distance to it is NaN.
        return [(str(d), int(o), float(s)) for d, o, s in rows if s is not None and not math.isnan(s)]

    def insert_postings(self, cur: Any, index_version: str, doc_id: str, postings: list) -> None:
        with cur.copy("COPY ctx_lexical_postings (index_version, term, doc_id, chunk_count, ordinals, tfs, lengths) "
                      "FROM STDIN") as copy:
            for row in postings_rows(index_version, doc_id, postings):
                copy.write_row(row)


class PostgresChunkStore(ChunkStore):
    """The store over a Postgres database (not migrated until `migrate`; `open_store` does both)."""

    def __init__(self, url: str, pool_size: int = 4, ef_search: int = PostgresBackend.DEFAULT_EF_SEARCH):
        super().__init__(PostgresBackend(url, pool_size=pool_size, ef_search=ef_search))
