-- Runs once, when the pgvector/pgvector container initialises an empty data directory
-- (compose.yaml mounts it into /docker-entrypoint-initdb.d). POSTGRES_DB creates `ctx`, the chunk
-- store's database (DATABASE_URL; the store's first migration creates the vector extension);
-- Dagster's run, event-log and schedule tables live apart in `dagster` (DAGSTER_PG_URL).
CREATE DATABASE dagster;
