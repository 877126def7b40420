"""Names the Dagster definitions and the library share: written here once.

Asset keys are plain strings so that library code (the CLI's run watcher, the benchmarks) can read
the events of the assets without importing the definitions."""

from __future__ import annotations

# The alias applications search and the gate promotes to.
PRODUCTION_ALIAS = "production"

# The ingest assets, one partition per document.
PARSED_CHUNKS = "parsed_chunks"
CHUNK_HEADERS = "chunk_headers"
CHUNK_EMBEDDINGS = "chunk_embeddings"  # materialized per document as it commits
DOCUMENTS_PARTITIONS = "documents"
INGEST_GROUP = "ingest"

# The evaluation assets.
RETRIEVAL_EVAL = "retrieval_eval"  # per document partition
DOCUMENT_GATE = "document_gate"  # its per-partition check
CANDIDATE_EVALUATION = "candidate_evaluation"  # every partition of a candidate, decided (eval_gate)
EVALUATION_FOLLOWS_INGEST = "evaluation_follows_ingest"  # the automation sensor of retrieval_eval
PROMOTED_INDEX = "promoted_index"
EVALUATION_GROUP = "evaluation"

# Failure metadata of the evaluation steps meaning "evaluate again" (the candidate or production changed
# meanwhile), not "blocked": `ctx eval` evaluates once more.
STALE_EVALUATION = "stale_evaluation"
BASE_MOVED = "base_moved"

# Jobs.
INGEST_JOB = "ingest_documents"
EVALUATE_AND_PROMOTE_JOB = "evaluate_and_promote"

# The run tags that say which partitions a run covers, as backfills set them (Dagster documents them as
# strings, not as a public constant; tests/unit/test_partition_tags.py checks them against the installed
# Dagster so an upgrade that renames them fails there).
PARTITION_TAG = "dagster/partition"
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
