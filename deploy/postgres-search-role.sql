-- The search service's read-only role, `ctx_search`: it may read the chunk store's tables and nothing else
-- (no INSERT/UPDATE/DELETE, no DDL, every transaction read-only), so a compromised or buggy search replica
-- cannot change the index. `ctx serve` connects as it (compose: search's DATABASE_URL; Kubernetes: the
-- Secret ctx-search-db, deploy/README.md); everything else (ctx migrate, the code server, runs) connects as
-- the owner role that creates the tables.
--
-- Run it in the store's database AS THE OWNER ROLE (the user of the ingest DATABASE_URL, the one `ctx
-- migrate` runs as), because the default privileges below are that role's: tables the migrations create
-- later are readable by ctx_search without running this again.
--   compose: mounted into /docker-entrypoint-initdb.d (20-search-role.sql), so it runs once, as
--            POSTGRES_USER in database ctx, when the data volume is first initialised; the password is the
--            compose secret search_db_password (CTX_SEARCH_DB_PASSWORD in deploy/.env). On a volume
--            initialised before this file existed, run it once by hand:
--              docker compose -f deploy/compose.yaml exec -T postgres \
--                psql -v ON_ERROR_STOP=1 -U ctx -d ctx -f - < deploy/postgres-search-role.sql
--   Kubernetes / any external Postgres: as the owner, with the password as a psql variable:
--              psql "$OWNER_DATABASE_URL" -v ON_ERROR_STOP=1 -v search_password="$CTX_SEARCH_DB_PASSWORD" \
--                -f deploy/postgres-search-role.sql
-- Idempotent: running it again resets the password and re-grants (a password rotation is a re-run).

\if :{?search_password}
\else
  \set search_password `cat /run/secrets/search_db_password`
\endif

SELECT format('CREATE ROLE ctx_search LOGIN PASSWORD %L', :'search_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ctx_search') \gexec
-- (CREATE ROLE's defaults: NOSUPERUSER NOCREATEDB NOCREATEROLE; only the login and password are set again.)
ALTER ROLE ctx_search WITH LOGIN PASSWORD :'search_password';
-- Every transaction of the role is read-only, whatever the client asks for.
ALTER ROLE ctx_search SET default_transaction_read_only = on;

GRANT CONNECT ON DATABASE :"DBNAME" TO ctx_search;
GRANT USAGE ON SCHEMA public TO ctx_search;
REVOKE CREATE ON SCHEMA public FROM ctx_search;
-- The tables that exist now (none on a fresh volume: the migrations create them) ...
GRANT SELECT ON ALL TABLES IN SCHEMA public TO ctx_search;
-- ... and every table the owner (the role running this file) creates from now on: ctx migrate's.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO ctx_search;
