"""Versioned schema migrations. Append new steps; never edit an applied one. Both engines number their
steps alike (a step one engine does not need is empty), so one version names the schema on either."""

from __future__ import annotations

from ..errors import SchemaOutdated

_COMMON_V1 = [
    """CREATE TABLE IF NOT EXISTS ctx_sources (
        doc_id TEXT PRIMARY KEY, path TEXT NOT NULL, file_hash TEXT, registered_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_index_versions (
        index_version TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_documents (
        doc_id TEXT NOT NULL, index_version TEXT NOT NULL, source_path TEXT NOT NULL, kind TEXT NOT NULL,
        title TEXT NOT NULL, file_hash TEXT NOT NULL, n_chunks INTEGER NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (doc_id, index_version))""",
]

_CHUNKS = """CREATE TABLE IF NOT EXISTS ctx_chunks (
        index_version TEXT NOT NULL, doc_id TEXT NOT NULL, ordinal INTEGER NOT NULL, source_doc TEXT NOT NULL,
        title TEXT NOT NULL, section_path TEXT NOT NULL, page_start INTEGER, page_end INTEGER, text TEXT NOT NULL,
        token_count INTEGER NOT NULL, content_hash TEXT NOT NULL, external_id TEXT, header TEXT,
        header_source TEXT, header_model TEXT, {embedding}, embedding_dim INTEGER,
        PRIMARY KEY (index_version, doc_id, ordinal))"""

_HEADER_CACHE = """CREATE TABLE IF NOT EXISTS ctx_header_cache (
        cache_key TEXT PRIMARY KEY, header TEXT NOT NULL, model TEXT NOT NULL, created_at TEXT NOT NULL)"""

_EVAL_AND_ALIASES = [
    """CREATE TABLE IF NOT EXISTS ctx_aliases (
        name TEXT PRIMARY KEY, index_version TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_alias_history (
        name TEXT NOT NULL, seq INTEGER NOT NULL, index_version TEXT NOT NULL, previous_version TEXT,
        action TEXT NOT NULL, reason TEXT, changed_at TEXT NOT NULL, PRIMARY KEY (name, seq))""",
    """CREATE TABLE IF NOT EXISTS ctx_eval_runs (
        run_id TEXT PRIMARY KEY, index_version TEXT NOT NULL, evaluator_id TEXT NOT NULL, evaluator TEXT NOT NULL,
        gold_sha256 TEXT NOT NULL, created_at TEXT NOT NULL, metrics TEXT NOT NULL, gate TEXT)""",
    """CREATE TABLE IF NOT EXISTS ctx_eval_tasks (
        run_id TEXT NOT NULL, task_id TEXT NOT NULL, mode TEXT NOT NULL, status TEXT NOT NULL,
        first_rank INTEGER, pass_at_5 DOUBLE PRECISION, pass_at_10 DOUBLE PRECISION, pass_at_20 DOUBLE PRECISION,
        reciprocal_rank DOUBLE PRECISION, ndcg_at_10 DOUBLE PRECISION, PRIMARY KEY (run_id, task_id, mode))""",
]

# How to build a version again (endpoints, served name, prompts, embedder), apart from the fingerprint:
# the fingerprint names what the vectors mean; the recipe lets ingest keep that version fresh.
_RECIPE = ["ALTER TABLE ctx_index_versions ADD COLUMN recipe TEXT"]

# The persistent lexical index (lexical_index.py): postings written with each document's chunks, and each
# document's token total for BM25's average length. Documents stored before it have lexical_tokens NULL
# and are indexed on their first lexical search.
_POSTINGS = """CREATE TABLE IF NOT EXISTS ctx_lexical_postings (
        index_version TEXT NOT NULL, term TEXT NOT NULL, doc_id TEXT NOT NULL, chunk_count INTEGER NOT NULL,
        ordinals INTEGER[] NOT NULL, tfs INTEGER[] NOT NULL, lengths INTEGER[] NOT NULL)"""
_LEXICAL = [_POSTINGS, "ALTER TABLE ctx_documents ADD COLUMN lexical_tokens BIGINT"]

# The inbox sensor's per-entry state (inbox_state.py), so its cursor stays small; one row per listed path.
_INBOX_ENTRIES = [
    """CREATE TABLE IF NOT EXISTS ctx_inbox_entries (
        inbox TEXT NOT NULL, path TEXT NOT NULL, doc_id TEXT, size BIGINT NOT NULL, mtime_ns BIGINT NOT NULL,
        etag TEXT, revision TEXT, first_seen DOUBLE PRECISION NOT NULL, settled_at DOUBLE PRECISION,
        status TEXT NOT NULL, reason TEXT, requested_tick BIGINT, run_key TEXT,
        failed_attempts INTEGER NOT NULL DEFAULT 0, next_retry DOUBLE PRECISION, PRIMARY KEY (inbox, path))""",
]

# Each document partition's evaluation of a candidate (`retrieval_eval`): the runs it read its task results from,
# what it was evaluated against (`basis`: the candidate's and production's content revisions, the gold set, the
# search), and its per-document verdict. One row per (candidate, document); a re-evaluation replaces it.
_EVAL_DOCUMENTS = [
    """CREATE TABLE IF NOT EXISTS ctx_eval_documents (
        index_version TEXT NOT NULL, doc_id TEXT NOT NULL, run_id TEXT, baseline_run_id TEXT,
        production_version TEXT, basis TEXT NOT NULL, task_ids TEXT NOT NULL, passed BOOLEAN NOT NULL,
        reasons TEXT NOT NULL, metrics TEXT NOT NULL, evaluated_at TEXT NOT NULL,
        PRIMARY KEY (index_version, doc_id))""",
]

# DuckDB's compacted lexical index (lexical_index.py): one row per (version, term) holding the postings of
# every document compacted into it, found through an ART index on its one-column key, so a query looks up
# its terms' rows instead of scanning all postings (a Postgres B-tree already finds a term's rows).
# ctx_lexical_postings keeps what was written since; a document's compacted entries count only while its
# lexical_compacted is set.
_LEXICAL_TERMS = [
    """CREATE TABLE IF NOT EXISTS ctx_lexical_terms (
        term_key TEXT NOT NULL, index_version TEXT NOT NULL, term TEXT NOT NULL, doc_ids TEXT[] NOT NULL,
        chunk_counts INTEGER[] NOT NULL, ordinals INTEGER[][] NOT NULL, tfs INTEGER[][] NOT NULL,
        lengths INTEGER[][] NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ctx_lexical_terms_key ON ctx_lexical_terms (term_key)",
    "ALTER TABLE ctx_documents ADD COLUMN lexical_compacted BOOLEAN",
]

# Guarded deletions: a document purged while an alias can still roll back to versions that hold it keeps its
# rows there, one row per (version, document) here (corpus.py: purge_document, release_retained), until that
# version can no longer be returned to; and removals the inbox sensor held (too many at once, inbox_state.py)
# until an operator confirms them (`ctx inbox confirm-removals`).
_GUARDED_DELETIONS = [
    """CREATE TABLE IF NOT EXISTS ctx_retained_documents (
        index_version TEXT NOT NULL, doc_id TEXT NOT NULL, alias TEXT NOT NULL, retained_at TEXT NOT NULL,
        PRIMARY KEY (index_version, doc_id))""",
    """CREATE TABLE IF NOT EXISTS ctx_inbox_removals (
        inbox TEXT NOT NULL, path TEXT NOT NULL, doc_id TEXT NOT NULL, held_at DOUBLE PRECISION NOT NULL,
        reason TEXT NOT NULL, confirmed_at DOUBLE PRECISION, PRIMARY KEY (inbox, path))""",
]

MIGRATIONS: dict[str, list[tuple[int, list[str]]]] = {
    "duckdb": [
        (1, _COMMON_V1 + [
            _CHUNKS.format(embedding="embedding FLOAT[]"),
            "CREATE INDEX IF NOT EXISTS ctx_chunks_doc ON ctx_chunks (doc_id)",
        ]),
        (2, [_HEADER_CACHE]),
        (3, _EVAL_AND_ALIASES),
        (4, _RECIPE),
        (5, _LEXICAL),
        (6, _INBOX_ENTRIES),
        (7, _EVAL_DOCUMENTS),
        (8, _LEXICAL_TERMS),
        (9, _GUARDED_DELETIONS),
    ],
    "postgres": [
        (1, ["CREATE EXTENSION IF NOT EXISTS vector"] + _COMMON_V1 + [
            _CHUNKS.format(embedding="embedding vector"),
            "CREATE INDEX IF NOT EXISTS ctx_chunks_doc ON ctx_chunks (doc_id)",
            "CREATE INDEX IF NOT EXISTS ctx_chunks_version ON ctx_chunks (index_version, embedding_dim)",
        ]),
        (2, [_HEADER_CACHE]),
        (3, _EVAL_AND_ALIASES),
        (4, _RECIPE),
        (5, _LEXICAL + [
            "CREATE INDEX IF NOT EXISTS ctx_lexical_postings_term ON ctx_lexical_postings (index_version, term)",
            "CREATE INDEX IF NOT EXISTS ctx_lexical_postings_doc ON ctx_lexical_postings (doc_id, index_version)",
        ]),
        (6, _INBOX_ENTRIES),
        (7, _EVAL_DOCUMENTS),
        (8, []),  # the compacted lexical index is DuckDB's alone
        (9, _GUARDED_DELETIONS),
    ],
}

LATEST_SCHEMA: int = max(v for v, _ in MIGRATIONS["duckdb"])
"""The schema version this release needs (and `ctx migrate` brings a store to)."""

assert all([v for v, _ in steps] == list(range(1, LATEST_SCHEMA + 1)) for steps in MIGRATIONS.values())


def pending_versions(dialect: str, applied: list[int]) -> list[int]:
    """This release's migrations of `dialect` that `applied` (a store's applied versions) lacks."""
    done = set(applied)
    return [v for v, _ in MIGRATIONS[dialect] if v not in done]


def check_schema(dialect: str, applied: list[int], location: str) -> int:
    """The schema version of a store with `applied` migrations (0: none); `SchemaOutdated` unless it is
    exactly this release's: behind it (`ctx migrate` first), or migrated by a newer release."""
    current = max(applied, default=0)
    if current > LATEST_SCHEMA:
        raise SchemaOutdated(
            f"the store's schema is at version {current}, newer than this release's {LATEST_SCHEMA}: it was "
            f"migrated by a newer release; run that release (or a newer one) against it ({location})",
            current=current, needed=LATEST_SCHEMA)
    if pending_versions(dialect, applied):
        raise SchemaOutdated(
            f"the store's schema is at version {current}, this release needs {LATEST_SCHEMA}: run `ctx migrate` "
            f"(or the migrate job) first ({location})", current=current, needed=LATEST_SCHEMA)
    return current
