"""Schema migrations as a step of their own: `open_store(..., migrate=False)` (search replicas) runs no
DDL and refuses a schema other than this release's; `ctx migrate` brings the store there, `--check` says
whether it is. On a real DuckDB file and a real Postgres."""

from __future__ import annotations

import argparse
import re
import threading
import uuid
from pathlib import Path

import psycopg
import pytest

from contextual_assets.cli.commands import migrate as migrate_command
from contextual_assets.errors import SchemaOutdated, StoreError
from contextual_assets.store import connect_store, open_store
from contextual_assets.store.migrations import LATEST_SCHEMA
from tests.support import run_ctx

ALL = ", ".join(str(v) for v in range(1, LATEST_SCHEMA + 1))


@pytest.fixture(params=["duckdb", "postgres"])
def target(request, tmp_path) -> tuple[str | None, Path]:
    """(database URL or None, DuckDB file): a store that does not exist yet, or an empty database."""
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    return url, tmp_path / ".ctx" / "index.duckdb"


@pytest.fixture
def ctx_env(env, target) -> dict[str, str]:
    """A `ctx` subprocess's environment naming `target`'s store."""
    url, path = target
    return {**env, "CTX_DUCKDB_PATH": str(path), **({"DATABASE_URL": url} if url else {})}


def _ctx_tables(url: str | None, path: Path) -> list[str]:
    """The store's tables (ctx_*) in the database, read without the store's code."""
    if url is None:
        if not path.exists():
            return []
        import duckdb

        with duckdb.connect(str(path)) as con:
            return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'ctx%'")
        return [r[0] for r in rows.fetchall()]


def _run_migrate(monkeypatch, target, check: bool = False) -> int:
    """`ctx migrate` in this process: the command's `run` with settings from the environment."""
    url, path = target
    monkeypatch.setenv("CTX_DUCKDB_PATH", str(path))
    if url:
        monkeypatch.setenv("DATABASE_URL", url)
    else:
        monkeypatch.delenv("DATABASE_URL", raising=False)
    return migrate_command.run(argparse.Namespace(check=check))


def test_a_fresh_store_is_refused_and_left_untouched(target):
    url, path = target
    with pytest.raises(SchemaOutdated) as caught:
        open_store(url, path, migrate=False)
    message = str(caught.value)
    assert f"the store's schema is at version 0, this release needs {LATEST_SCHEMA}" in message
    assert "run `ctx migrate`" in message and "\n" not in message
    assert (caught.value.current, caught.value.needed, caught.value.newer) == (0, LATEST_SCHEMA, False)
    assert _ctx_tables(url, path) == [], "a check must run no DDL"
    assert url or not path.exists(), "a check must not create the DuckDB file"


def test_ctx_migrate_applies_then_the_store_opens(target, ctx_env):
    url, path = target
    check = run_ctx(ctx_env, "migrate", "--check")
    assert check.returncode == 1, check.stderr
    assert check.stdout.strip() == (f"schema version 0, this release needs {LATEST_SCHEMA} (pending: {ALL}; "
                                    "run `ctx migrate`)")
    assert _ctx_tables(url, path) == [], "--check applies nothing"

    first = run_ctx(ctx_env, "migrate", check=True)
    assert first.stdout.strip() == f"schema version {LATEST_SCHEMA} (applied: {ALL})"
    again = run_ctx(ctx_env, "migrate", check=True)
    assert again.stdout.strip() == f"schema version {LATEST_SCHEMA} (up to date)"
    current = run_ctx(ctx_env, "migrate", "--check")
    assert current.returncode == 0 and current.stdout.strip() == f"schema version {LATEST_SCHEMA} (up to date)"

    store = open_store(url, path, migrate=False)
    try:
        assert store.schema_version() == store.check_schema() == LATEST_SCHEMA
        assert store.pending_migrations() == []
        store.corpus.register_index_version("iv-a", {"header_source": "structural"})  # the tables are there
    finally:
        store.close()


def test_a_store_one_migration_behind_is_refused_until_migrated(target, monkeypatch, capsys):
    url, path = target
    store = connect_store(url, path)
    try:
        assert store.apply_migrations(upto=LATEST_SCHEMA - 1) == (LATEST_SCHEMA - 1, list(range(1, LATEST_SCHEMA)))
    finally:
        store.close()
    with pytest.raises(SchemaOutdated, match=rf"at version {LATEST_SCHEMA - 1}, this release needs {LATEST_SCHEMA}: "
                                             r"run `ctx migrate` \(or the migrate job\) first"):
        open_store(url, path, migrate=False)

    assert _run_migrate(monkeypatch, target, check=True) == 1
    assert f"(pending: {LATEST_SCHEMA}; run `ctx migrate`)" in capsys.readouterr().out
    assert _run_migrate(monkeypatch, target) == 0
    assert capsys.readouterr().out.strip() == f"schema version {LATEST_SCHEMA} (applied: {LATEST_SCHEMA})"
    assert _run_migrate(monkeypatch, target, check=True) == 0
    open_store(url, path, migrate=False).close()


def test_a_schema_newer_than_the_release_is_refused(target, ctx_env):
    url, path = target
    store = open_store(url, path)  # the default still migrates on open
    try:
        with store.backend.transaction() as cur:
            store.backend.exec(cur, "INSERT INTO ctx_schema_migrations VALUES (?, ?)", (LATEST_SCHEMA + 1, "later"))
    finally:
        store.close()
    with pytest.raises(SchemaOutdated, match="migrated by a newer release") as caught:
        open_store(url, path, migrate=False)
    assert caught.value.newer and caught.value.current == LATEST_SCHEMA + 1
    assert f"version {LATEST_SCHEMA + 1}, newer than this release's {LATEST_SCHEMA}" in str(caught.value)
    for args in (["migrate"], ["migrate", "--check"]):
        refused = run_ctx(ctx_env, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert refused.stderr.startswith("error: ") and "newer release" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and refused.stdout == ""


def test_concurrent_migrators_apply_each_migration_once(pg_url, tmp_path):
    """Two `ctx migrate` at once (two pods of a hook): the advisory lock lets one apply, the other finds
    nothing pending; neither fails."""
    stores = [connect_store(pg_url, tmp_path / "unused.duckdb") for _ in range(2)]
    results: list[tuple[int, list[int]]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def migrate(store) -> None:
        start.wait()
        try:
            results.append(store.apply_migrations())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for s in stores:
        s.close()
    assert not errors, errors
    assert [r[0] for r in results] == [LATEST_SCHEMA, LATEST_SCHEMA]
    assert sorted(v for _, applied in results for v in applied) == list(range(1, LATEST_SCHEMA + 1))


def test_ctx_migrate_with_the_database_down_exits_3(env, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connections are refused
    down = run_ctx({**env, "DATABASE_URL": f"postgresql://ctx@127.0.0.1:{port}/ctx"}, "migrate", "--check")
    assert down.returncode == 3, (down.stdout, down.stderr)
    assert down.stderr.startswith("error: cannot connect to Postgres") and len(down.stderr.strip().splitlines()) == 1


def _documented_grants(role: str, database: str) -> list[str]:
    """docs/upgrading.md's SQL for the search role, for `role` on `database`, owner `postgres` (this
    server's migrator)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "upgrading.md").read_text()
    block = text.split("```sql\n", 1)[1].split("```", 1)[0]
    block = re.sub(r"\bctx_search\b", role, block)
    block = re.sub(r"\bDATABASE ctx\b", f"DATABASE {database}", block)
    block = re.sub(r"\bFOR ROLE ctx\b", "FOR ROLE postgres", block)
    return [s.strip() for s in block.split(";") if s.strip()]


def test_the_documented_read_only_role_can_check_and_read_but_not_write(pg_url, tmp_path):
    from urllib.parse import urlsplit

    role = f"ctx_search_{uuid.uuid4().hex[:8]}"
    reader_url = pg_url.replace("postgres:@", f"{role}:@", 1)
    assert reader_url != pg_url
    writer = connect_store(pg_url, tmp_path / "unused.duckdb")
    statements = _documented_grants(role, urlsplit(pg_url).path.lstrip("/"))
    assert statements[0].startswith("CREATE ROLE") and len(statements) == 5
    try:
        writer.apply_migrations(upto=LATEST_SCHEMA - 1)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(statements[0])
            with pytest.raises(StoreError, match="may not read the store's tables"):
                open_store(reader_url, tmp_path / "unused.duckdb", migrate=False)  # no grants yet
            for statement in statements[1:]:
                conn.execute(statement)
        with pytest.raises(SchemaOutdated, match=f"at version {LATEST_SCHEMA - 1}, this release needs"):
            open_store(reader_url, tmp_path / "unused.duckdb", migrate=False)
        writer.apply_migrations()  # creates tables after the grants: the default privileges cover them
    finally:
        writer.close()
    reader = open_store(reader_url, tmp_path / "unused.duckdb", migrate=False)
    reader.close()
    with psycopg.connect(reader_url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'ctx%'")]
        assert len(tables) > 10
        for table in tables:
            conn.execute(f"SELECT count(*) FROM {table}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO ctx_aliases VALUES ('production', 'iv-x', 'now')")
