-- Runs once, when the pgvector/pgvector container initialises an empty data directory
-- (compose.yaml mounts it into /docker-entrypoint-initdb.d as 10-dagster-database.sql). POSTGRES_DB creates
-- `ctx`, the chunk store's database (DATABASE_URL; `ctx migrate` creates its tables and the vector
-- extension); Dagster's run, event-log and schedule tables live apart in `dagster` (DAGSTER_PG_URL). The
-- search service's read-only role is created next, by postgres-search-role.sql (20-search-role.sql).
CREATE DATABASE dagster;
