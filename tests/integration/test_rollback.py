"""`ctx rollback` walks back through production's history and never forward again; a purge keeps a
document in the versions a rollback can return to until it no longer can. Both back-ends, real stores;
the CLI as a user runs it."""

from __future__ import annotations

import json

import pytest

from contextual_assets.lifecycle.coverage import coverage_of, live_documents
from contextual_assets.models import SourceRecord
from contextual_assets.store import open_store
from contextual_assets.store.aliases import RollbackRefused
from tests.integration.test_store_contract import put, store  # noqa: F401 - `store`: both back-ends
from tests.support import run_ctx


def promote(s, *versions: str) -> None:
    for version in versions:
        s.corpus.register_index_version(version, {"header_source": "structural", "header_model": "structural-v1",
                                                  "embedder": "test-embedder", "chunker": "test-chunker"})
        s.aliases.set("production", version, f"promote {version}")


def test_rollback_twice_walks_back_and_then_stops_with_a_clear_error(store):  # noqa: F811
    promote(store, "iv-a", "iv-b", "iv-c")
    assert store.aliases.rollback("production") == ("iv-b", "iv-c")
    assert store.aliases.rollback("production") == ("iv-a", "iv-b"), "older again, not forward to iv-c"
    assert store.aliases.get("production") == "iv-a" and store.aliases.rollback_targets("production") == []
    with pytest.raises(RollbackRefused, match="no previous version to roll back to: it points at iv-a") as refused:
        store.aliases.rollback("production")
    assert "\n" not in str(refused.value)
    assert store.aliases.get("production") == "iv-a", "a refused rollback moves nothing"
    assert [(h["action"], h["index_version"], h["previous_version"]) for h in store.aliases.history("production")] \
        == [("promote", "iv-a", None), ("promote", "iv-b", "iv-a"), ("promote", "iv-c", "iv-b"),
            ("rollback", "iv-b", "iv-c"), ("rollback", "iv-a", "iv-b")]
    promote(store, "iv-d")
    assert store.aliases.rollback_targets("production") == ["iv-a"]


def test_rollback_to_a_reachable_version_only(store):  # noqa: F811
    promote(store, "iv-a", "iv-b", "iv-c", "iv-d")
    with pytest.raises(RollbackRefused, match="cannot roll back to iv-x; a rollback can reach iv-c, iv-b, iv-a"):
        store.aliases.rollback("production", to="iv-x")
    with pytest.raises(RollbackRefused, match="cannot roll back to iv-d"):
        store.aliases.rollback("production", to="iv-d")  # where it points already
    assert store.aliases.rollback("production", to="iv-b") == ("iv-b", "iv-d")
    assert store.aliases.rollback_targets("production") == ["iv-a"]
    with pytest.raises(RollbackRefused, match="a rollback can reach iv-a"):
        store.aliases.rollback("production", to="iv-c")  # rolled back past: never forward again
    promote(store, "iv-e")
    assert store.aliases.rollback_targets("production") == ["iv-b", "iv-a"]
    assert store.aliases.rollback("production") == ("iv-b", "iv-e")


def test_a_purge_keeps_the_rows_of_rollback_targets_until_they_cannot_be_returned_to(store):  # noqa: F811
    for version in ("iv-a", "iv-b", "iv-c"):
        put(store, "keep.txt", ["kept text stays"], version=version)
    put(store, "gone.txt", ["vanishing quokka paragraph"], version="iv-b", offset=2)
    put(store, "gone.txt", ["vanishing quokka paragraph"], version="iv-c", offset=2)
    put(store, "gone.txt", ["vanishing quokka paragraph"], version="iv-d", offset=2)  # never promoted
    store.corpus.register_source(SourceRecord(doc_id="gone.txt", path="/in/gone.txt", file_hash="x"))
    promote(store, "iv-a", "iv-b", "iv-c")

    # Out of production (iv-c) and of a version no rollback reaches (iv-d); kept in iv-b, a rollback target.
    assert store.corpus.purge_document("gone.txt") == 2
    assert store.corpus.get_source("gone.txt") is None
    assert [store.corpus.count_chunks(v, "gone.txt") for v in ("iv-b", "iv-c", "iv-d")] == [1, 0, 0]
    assert store.corpus.retained() == {"iv-b": ["gone.txt"]}
    assert store.corpus.release_retained() == 0, "iv-b can still be returned to"

    # Rolled back to iv-b: the operator gets the old index back, the document with it.
    store.aliases.rollback("production")
    assert store.corpus.release_retained() == 0 and store.corpus.retained() == {"iv-b": ["gone.txt"]}
    assert [h.doc_id for h in store.search.lexical("quokka", "iv-b", 5)] == ["gone.txt"]
    # ... but a document only kept for the rollback is not live: a candidate without it is not blocked.
    assert "gone.txt" not in live_documents(store, "iv-b")
    assert coverage_of(store, "iv-d", live_documents(store, "iv-b")).missing == ["keep.txt"]

    # Rolled back past iv-b: no rollback returns there, its kept rows go (and their postings).
    store.aliases.rollback("production")
    assert store.corpus.release_retained() == 1
    assert store.corpus.count_chunks(doc_id="gone.txt") == 0 and store.corpus.retained() == {}
    assert store.search.lexical("quokka", "iv-b", 5) == []
    assert store.corpus.count_chunks("iv-b", "keep.txt") == 1, "other documents are untouched"


def test_a_document_registered_again_keeps_its_rows_when_its_version_is_released(store):  # noqa: F811
    for version in ("iv-a", "iv-b"):
        put(store, "back.txt", ["returning text"], version=version)
    promote(store, "iv-0", "iv-a", "iv-b")
    assert store.corpus.purge_document("back.txt") == 1 and store.corpus.retained() == {"iv-a": ["back.txt"]}
    store.corpus.register_source(SourceRecord(doc_id="back.txt", path="/in/back.txt", file_hash="y"))  # back
    store.aliases.rollback("production", to="iv-0")
    assert store.corpus.release_retained() == 0, "a live document's rows are not purged"
    assert store.corpus.retained() == {} and store.corpus.count_chunks("iv-a", "back.txt") == 1


@pytest.fixture(params=["duckdb", "postgres"])
def cli_env(request, env, tmp_path):
    """`ctx`'s environment and a store at the same place (the DuckDB file under CTX_HOME, or Postgres)."""
    if request.param == "postgres":
        env = {**env, "DATABASE_URL": request.getfixturevalue("pg_url")}
    s = open_store(env.get("DATABASE_URL"), tmp_path / ".ctx" / "index.duckdb")
    yield env, s
    s.close()


def test_ctx_rollback_walks_back_refuses_clearly_and_status_shows_where_it_can_go(cli_env):
    env, s = cli_env
    promote(s, "iv-a", "iv-b", "iv-c")
    s.close()  # the CLI opens the same store

    status = json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    assert status["production"] == "iv-c" and status["rollback_targets"] == ["iv-b", "iv-a"]
    assert [(h["action"], h["index_version"]) for h in status["alias_history"]] == \
        [("promote", "iv-a"), ("promote", "iv-b"), ("promote", "iv-c")]
    assert run_ctx(env, "rollback", check=True).stdout.strip() == "production: iv-c -> iv-b"
    refused = run_ctx(env, "rollback", "--to", "iv-c")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == "error: alias 'production' cannot roll back to iv-c; a rollback can reach iv-a"
    assert run_ctx(env, "rollback", "--to", "iv-a", check=True).stdout.strip() == "production: iv-b -> iv-a"
    last = run_ctx(env, "rollback")
    assert last.returncode == 2 and len(last.stderr.strip().splitlines()) == 1
    assert "no previous version to roll back to: it points at iv-a and nothing older is left" in last.stderr
    text = run_ctx(env, "status", check=True).stdout
    lines = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in text.splitlines() if "  " in line}
    assert lines["rollback targets"] == "none (nothing older is left)"
    assert lines["production history"] == "promote iv-a, promote iv-b, promote iv-c, rollback iv-b, rollback iv-a"
