"""The ingest data path outside Dagster, in two rooms: `inbox/` (what the `new_documents` sensor does in
one tick: list the inbox, key and select files, plan what to request) and `pipeline/` (what one ingest
step runs: parse -> headers -> embedding -> commit, across documents)."""
