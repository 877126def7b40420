"""The `ChunkStore` interface and the SQL both back-ends share.

SQL is written with `?` placeholders and always parameterized; back-ends translate the
placeholder style. Dialect-specific parts are DDL, the embedding column and dense search.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..models import DocumentRecord, EmbeddedChunk, HeaderedChunk, SearchHit, SourceRecord
from .lexical import LexicalIndex, dense_top_k, reciprocal_rank_fusion

_CHUNK_COLUMNS = (
    "index_version, doc_id, ordinal, source_doc, title, section_path, page_start, page_end, text, "
    "token_count, content_hash, external_id, header, header_source, header_model"
)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class CorpusSnapshot:
    """Every chunk of one index version, in memory, for lexical (and, on DuckDB, dense) search."""

    revision: tuple
    hits: list[SearchHit]
    lexical: LexicalIndex
    matrix: np.ndarray | None = None
    keys: dict[str, int] = field(default_factory=dict)


def hit_key(hit: SearchHit) -> str:
    return f"{hit.doc_id}\x1f{hit.ordinal}"


class ChunkStore(ABC):
    """Chunks, headers, vectors and index versions; one atomic transaction per document."""

    dialect: str = "abstract"
    location: str = ""

    def __init__(self) -> None:
        # Explicit, per-instance cache: in-memory search corpora keyed by index version,
        # invalidated by the store revision (document count + last update).
        self._snapshots: dict[str, CorpusSnapshot] = {}
        self._snapshot_lock = threading.Lock()

    # ---- back-end primitives -------------------------------------------------------------
    @abstractmethod
    def migrate(self) -> int: ...

    @abstractmethod
    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """Yield a cursor-like object inside one transaction (commit on success, rollback on error)."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...

    @abstractmethod
    def _insert_chunks(self, cursor: Any, chunks: list[EmbeddedChunk], index_version: str) -> None: ...

    @abstractmethod
    def _embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]: ...

    def close(self) -> None:  # pragma: no cover - trivial
        pass

    # ---- shared SQL ------------------------------------------------------------------------
    def _exec(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        cursor.execute(self._sql(sql), params)

    def _fetch(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        cursor.execute(self._sql(sql), params)
        return cursor.fetchall()

    def schema_version(self) -> int:
        rows = self._query("SELECT coalesce(max(version), 0) FROM ctx_schema_migrations")
        return int(rows[0][0])

    def register_source(self, record: SourceRecord) -> None:
        self.register_sources([record])

    def register_sources(self, records: Sequence[SourceRecord]) -> None:
        """Register (or re-register) many sources in one transaction; the last record of a doc_id wins.
        One transaction matters on DuckDB, where each one opens the file (~25 ms): an inbox of 10,000
        new files costs minutes one by one and a fraction of a second here."""
        latest = list({r.doc_id: r for r in records}.values())
        if not latest:
            return
        now = utc_now()
        with self._transaction() as cur:
            for start in range(0, len(latest), 500):
                batch = latest[start : start + 500]
                placeholders = ", ".join("?" for _ in batch)
                self._exec(cur, f"DELETE FROM ctx_sources WHERE doc_id IN ({placeholders})", [r.doc_id for r in batch])
                self._exec(
                    cur,
                    "INSERT INTO ctx_sources (doc_id, path, file_hash, registered_at) VALUES "
                    + ", ".join("(?, ?, ?, ?)" for _ in batch),
                    [v for r in batch for v in (r.doc_id, r.path, r.file_hash, now)],
                )

    def get_source(self, doc_id: str) -> SourceRecord | None:
        rows = self._query("SELECT doc_id, path, file_hash FROM ctx_sources WHERE doc_id = ?", (doc_id,))
        return SourceRecord(doc_id=rows[0][0], path=rows[0][1], file_hash=rows[0][2]) if rows else None

    def list_sources(self) -> list[SourceRecord]:
        rows = self._query("SELECT doc_id, path, file_hash FROM ctx_sources ORDER BY doc_id")
        return [SourceRecord(doc_id=r[0], path=r[1], file_hash=r[2]) for r in rows]

    def register_index_version(self, index_version: str, fingerprint: dict[str, Any]) -> None:
        with self._transaction() as cur:
            # ON CONFLICT: concurrent first runs of a new version both register it safely.
            self._exec(
                cur,
                "INSERT INTO ctx_index_versions (index_version, fingerprint, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (index_version) DO NOTHING",
                (index_version, json.dumps(fingerprint, sort_keys=True), utc_now()),
            )

    def index_versions(self) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT v.index_version, v.fingerprint, v.created_at, "
            "  (SELECT count(*) FROM ctx_documents d WHERE d.index_version = v.index_version), "
            "  (SELECT count(*) FROM ctx_chunks c WHERE c.index_version = v.index_version) "
            "FROM ctx_index_versions v ORDER BY v.created_at"
        )
        return [
            {"index_version": r[0], "fingerprint": json.loads(r[1]), "created_at": r[2], "documents": int(r[3]),
             "chunks": int(r[4])}
            for r in rows
        ]

    def replace_document(self, document: DocumentRecord, chunks: list[EmbeddedChunk],
                         require_current_source: bool = False) -> None:
        """Swap every chunk of one document in one index version, in one transaction.

        With `require_current_source`, the commit happens only if the registered source still exists
        and has the content this run read: a run that lost a race with a newer edit, or whose file
        was deleted meanwhile, commits nothing (and says so) instead of resurrecting stale rows."""
        from ..errors import StaleDocumentError

        with self._transaction() as cur:
            if require_current_source:
                rows = self._fetch(cur, "SELECT file_hash FROM ctx_sources WHERE doc_id = ?", (document.doc_id,))
                if not rows:
                    raise StaleDocumentError(f"{document.doc_id}: its file was removed while this run worked; "
                                             "nothing committed")
                if rows[0][0] and rows[0][0] != document.file_hash:
                    raise StaleDocumentError(f"{document.doc_id}: the file changed while this run worked; the run "
                                             "for the new content commits it, this one committed nothing")
            self._exec(
                cur, "DELETE FROM ctx_chunks WHERE doc_id = ? AND index_version = ?",
                (document.doc_id, document.index_version),
            )
            self._exec(
                cur, "DELETE FROM ctx_documents WHERE doc_id = ? AND index_version = ?",
                (document.doc_id, document.index_version),
            )
            self._insert_chunks(cur, chunks, document.index_version)
            self._exec(
                cur,
                "INSERT INTO ctx_documents (doc_id, index_version, source_path, kind, title, file_hash, "
                "n_chunks, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (document.doc_id, document.index_version, document.source_path, document.kind, document.title,
                 document.file_hash, len(chunks), utc_now()),
            )

    def purge_document(self, doc_id: str) -> int:
        """Remove a document from every index version and forget its source."""
        with self._transaction() as cur:
            count = self._fetch(cur, "SELECT count(*) FROM ctx_chunks WHERE doc_id = ?", (doc_id,))
            self._exec(cur, "DELETE FROM ctx_chunks WHERE doc_id = ?", (doc_id,))
            self._exec(cur, "DELETE FROM ctx_documents WHERE doc_id = ?", (doc_id,))
            self._exec(cur, "DELETE FROM ctx_sources WHERE doc_id = ?", (doc_id,))
        return int(count[0][0])

    def documents(self, index_version: str | None = None) -> list[DocumentRecord]:
        sql = ("SELECT doc_id, index_version, source_path, kind, title, file_hash, n_chunks, updated_at "
               "FROM ctx_documents")
        params: tuple = ()
        if index_version is not None:
            sql += " WHERE index_version = ?"
            params = (index_version,)
        rows = self._query(sql + " ORDER BY index_version, doc_id", params)
        return [
            DocumentRecord(doc_id=r[0], index_version=r[1], source_path=r[2], kind=r[3], title=r[4], file_hash=r[5],
                           n_chunks=int(r[6]), updated_at=str(r[7]))
            for r in rows
        ]

    def count_chunks(self, index_version: str | None = None, doc_id: str | None = None) -> int:
        clauses, params = [], []
        if index_version is not None:
            clauses.append("index_version = ?")
            params.append(index_version)
        if doc_id is not None:
            clauses.append("doc_id = ?")
            params.append(doc_id)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return int(self._query("SELECT count(*) FROM ctx_chunks" + where, params)[0][0])

    def chunks(self, index_version: str, doc_id: str | None = None) -> list[HeaderedChunk]:
        sql = f"SELECT {_CHUNK_COLUMNS} FROM ctx_chunks WHERE index_version = ?"
        params: list[Any] = [index_version]
        if doc_id is not None:
            sql += " AND doc_id = ?"
            params.append(doc_id)
        rows = self._query(sql + " ORDER BY doc_id, ordinal", params)
        return [self._row_to_chunk(r) for r in rows]

    @staticmethod
    def _row_to_chunk(r: tuple) -> HeaderedChunk:
        return HeaderedChunk(
            doc_id=r[1], ordinal=int(r[2]), source_doc=r[3], title=r[4], section_path=json.loads(r[5]),
            page_start=r[6], page_end=r[7], text=r[8], token_count=int(r[9]), content_hash=r[10],
            external_id=r[11], header=r[12] or "", header_source=r[13] or "none", header_model=r[14] or "",
        )

    def revision(self, index_version: str) -> tuple:
        rows = self._query(
            "SELECT count(*), max(updated_at), coalesce(sum(n_chunks), 0) FROM ctx_documents WHERE index_version = ?",
            (index_version,),
        )
        return tuple(str(v) for v in rows[0])

    def _sql(self, sql: str) -> str:
        return sql

    # ---- header cache ----------------------------------------------------------------------
    def cached_headers(self, keys: Sequence[str]) -> dict[str, str]:
        """Headers already generated for these cache keys (see headers.cache for the key)."""
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            batch = unique[start : start + 500]
            placeholders = ", ".join("?" for _ in batch)
            rows = self._query(f"SELECT cache_key, header FROM ctx_header_cache WHERE cache_key IN ({placeholders})",
                               batch)
            found.update({r[0]: r[1] for r in rows})
        return found

    def cache_headers(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Store (cache_key, header, model) rows; the latest write of a key wins."""
        if not items:
            return
        with self._transaction() as cur:
            for key, header, model in dict((i[0], i) for i in items).values():
                self._exec(cur, "INSERT INTO ctx_header_cache (cache_key, header, model, created_at) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT (cache_key) DO UPDATE SET header = excluded.header, model = excluded.model, "
                           "created_at = excluded.created_at", (key, header, model, utc_now()))

    # ---- aliases (promotion with history) ------------------------------------------------------
    def get_alias(self, name: str) -> str | None:
        rows = self._query("SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def _lock_aliases(self, cur: Any) -> None:
        """Serialize alias changes (Postgres overrides; DuckDB already has one writer)."""

    def _write_alias(self, cur: Any, name: str, version: str, previous: str | None, action: str, reason: str) -> None:
        seq = self._fetch(cur, "SELECT coalesce(max(seq), 0) + 1 FROM ctx_alias_history WHERE name = ?", (name,))[0][0]
        self._exec(cur, "DELETE FROM ctx_aliases WHERE name = ?", (name,))
        self._exec(cur, "INSERT INTO ctx_aliases (name, index_version, updated_at) VALUES (?, ?, ?)",
                   (name, version, utc_now()))
        self._exec(cur, "INSERT INTO ctx_alias_history (name, seq, index_version, previous_version, action, reason, changed_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, int(seq), version, previous, action, reason, utc_now()))

    def set_alias(self, name: str, version: str, reason: str = "", expected: str | None = "<any>") -> str | None:
        """Point `name` at `version` atomically and record it; returns the version it pointed at before.
        With `expected`, refuse when the alias no longer points where the caller last saw it."""
        from ..errors import StoreError

        with self._transaction() as cur:
            self._lock_aliases(cur)
            rows = self._fetch(cur, "SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
            previous = rows[0][0] if rows else None
            if expected != "<any>" and previous != expected:
                raise StoreError(f"alias '{name}' moved to {previous} since the gate compared against {expected}; "
                                 "evaluate again")
            self._write_alias(cur, name, version, previous, "promote", reason)
        return previous

    def rollback_alias(self, name: str, reason: str = "rollback") -> tuple[str, str]:
        """Point `name` back at the version it held before its last change: (restored, replaced)."""
        from ..errors import StoreError

        with self._transaction() as cur:
            self._lock_aliases(cur)
            rows = self._fetch(cur, "SELECT index_version, previous_version FROM ctx_alias_history WHERE name = ? "
                                    "ORDER BY seq DESC LIMIT 1", (name,))
            if not rows or not rows[0][1]:
                raise StoreError(f"alias '{name}' has no previous version to roll back to")
            current, previous = rows[0]
            self._write_alias(cur, name, previous, current, "rollback", reason)
        return previous, current

    def alias_history(self, name: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT seq, index_version, previous_version, action, reason, changed_at FROM ctx_alias_history "
                           "WHERE name = ? ORDER BY seq", (name,))
        return [{"seq": int(r[0]), "index_version": r[1], "previous_version": r[2], "action": r[3], "reason": r[4],
                 "at": r[5]} for r in rows]

    # ---- evaluation results ---------------------------------------------------------------------
    def save_eval_run(self, run: dict[str, Any], tasks: Sequence[dict[str, Any]]) -> None:
        with self._transaction() as cur:
            self._exec(cur, "INSERT INTO ctx_eval_runs (run_id, index_version, evaluator_id, evaluator, gold_sha256, "
                       "created_at, metrics, gate) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (run["run_id"], run["index_version"], run["evaluator_id"], json.dumps(run["evaluator"]),
                        run["gold_sha256"], utc_now(), json.dumps(run["metrics"]), json.dumps(run.get("gate"))))
            for t in tasks:
                self._exec(cur, "INSERT INTO ctx_eval_tasks (run_id, task_id, mode, status, first_rank, pass_at_5, "
                           "pass_at_10, pass_at_20, reciprocal_rank, ndcg_at_10) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (run["run_id"], t["task_id"], t["mode"], t["status"], t["first_rank"], t["pass_at_5"],
                            t["pass_at_10"], t["pass_at_20"], t["reciprocal_rank"], t["ndcg_at_10"]))

    def set_eval_gate(self, run_id: str, gate: dict[str, Any]) -> None:
        with self._transaction() as cur:
            self._exec(cur, "UPDATE ctx_eval_runs SET gate = ? WHERE run_id = ?", (json.dumps(gate), run_id))

    def latest_eval_run(self, index_version: str, evaluator_id: str | None = None) -> dict[str, Any] | None:
        sql = ("SELECT run_id, index_version, evaluator_id, evaluator, gold_sha256, created_at, metrics, gate "
               "FROM ctx_eval_runs WHERE index_version = ?")
        params: list[Any] = [index_version]
        if evaluator_id is not None:
            sql += " AND evaluator_id = ?"
            params.append(evaluator_id)
        rows = self._query(sql + " ORDER BY created_at DESC, run_id DESC LIMIT 1", params)
        if not rows:
            return None
        r = rows[0]
        return {"run_id": r[0], "index_version": r[1], "evaluator_id": r[2], "evaluator": json.loads(r[3]),
                "gold_sha256": r[4], "created_at": r[5], "metrics": json.loads(r[6]),
                "gate": json.loads(r[7]) if r[7] else None}

    def eval_tasks(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT task_id, mode, status, first_rank, pass_at_5, pass_at_10, pass_at_20, reciprocal_rank, "
                           "ndcg_at_10 FROM ctx_eval_tasks WHERE run_id = ? ORDER BY mode, task_id", (run_id,))
        keys = ("task_id", "mode", "status", "first_rank", "pass_at_5", "pass_at_10", "pass_at_20", "reciprocal_rank",
                "ndcg_at_10")
        return [dict(zip(keys, r)) for r in rows]


    # ---- search ----------------------------------------------------------------------------
    def _hit(self, chunk: HeaderedChunk, score: float, index_version: str) -> SearchHit:
        return SearchHit(
            doc_id=chunk.doc_id, source_doc=chunk.source_doc, title=chunk.title, ordinal=chunk.ordinal,
            section_path=chunk.section_path, page_start=chunk.page_start, page_end=chunk.page_end, text=chunk.text,
            header=chunk.header, score=score, index_version=index_version, external_id=chunk.external_id,
        )

    def snapshot(self, index_version: str, with_vectors: bool = False) -> CorpusSnapshot:
        revision = self.revision(index_version)
        with self._snapshot_lock:
            cached = self._snapshots.get(index_version)
            if cached is not None and cached.revision == revision and (cached.matrix is not None or not with_vectors):
                return cached
            hits = [self._hit(c, 0.0, index_version) for c in self.chunks(index_version)]
            lexical = LexicalIndex([f"{h.title}\n{' / '.join(h.section_path)}\n{h.header}\n{h.text}" for h in hits])
            snap = CorpusSnapshot(revision=revision, hits=hits, lexical=lexical,
                                  keys={hit_key(h): i for i, h in enumerate(hits)})
            if with_vectors:
                snap.matrix = self._load_matrix(index_version, snap)
            self._snapshots[index_version] = snap
            return snap

    def _load_matrix(self, index_version: str, snap: CorpusSnapshot) -> np.ndarray:
        rows = self._embedding_rows(index_version)
        dim = next((len(v) for _, _, v in rows if v is not None), 0)
        matrix = np.zeros((len(snap.hits), dim), dtype=np.float32)
        for doc_id, ordinal, vector in rows:
            index = snap.keys.get(f"{doc_id}\x1f{ordinal}")
            if index is not None and vector is not None:
                matrix[index] = vector
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return matrix / norms

    def search_lexical(self, query: str, index_version: str, k: int = 10) -> list[SearchHit]:
        snap = self.snapshot(index_version)
        return [snap.hits[i].model_copy(update={"score": s}) for i, s in snap.lexical.search(query, k)]

    def search_dense(self, vector: Sequence[float], index_version: str, k: int = 10) -> list[SearchHit]:
        """Exact cosine search over the in-memory matrix; Postgres overrides this with HNSW."""
        snap = self.snapshot(index_version, with_vectors=True)
        assert snap.matrix is not None
        if snap.matrix.shape[0] and snap.matrix.shape[1] != len(vector):
            from ..errors import StoreError

            raise StoreError(
                f"query vector has {len(vector)} dimensions but index version {index_version} holds "
                f"{snap.matrix.shape[1]}-dimensional embeddings (embedder mismatch)"
            )
        top = dense_top_k(snap.matrix, np.asarray(vector, dtype=np.float32), k)
        return [snap.hits[i].model_copy(update={"score": s}) for i, s in top]

    def search_hybrid(self, query: str, vector: Sequence[float], index_version: str, k: int = 10,
                      candidates: int = 100) -> list[SearchHit]:
        """Reciprocal-rank fusion of dense and lexical candidate lists."""
        dense = self.search_dense(vector, index_version, max(k, candidates))
        lexical = self.search_lexical(query, index_version, max(k, candidates))
        by_key = {hit_key(h): h for h in lexical + dense}
        fused = reciprocal_rank_fusion([[hit_key(h) for h in dense], [hit_key(h) for h in lexical]], k)
        return [by_key[key].model_copy(update={"score": score}) for key, score in fused]
