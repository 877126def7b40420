"""`ctx` as a user runs it: a subprocess with settings from the environment."""

from __future__ import annotations

import json
import os

import pytest

from tests.support import copy_into, run_ctx


def test_ingest_search_status(tmp_path, env, samples_dir):
    corpus = tmp_path / "docs"
    copy_into([samples_dir / "supply_agreement.pdf", samples_dir / "rate_limiter.py"], corpus)
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage")
    ingest = run_ctx(env, "ingest", str(corpus), "--json")
    assert ingest.returncode == 1, "a failed document makes the exit code non-zero"
    outcomes = {o["key"]: o for o in json.loads(ingest.stdout)}
    assert outcomes["docs/supply_agreement.pdf"]["success"] and outcomes["docs/rate_limiter.py"]["success"]
    assert not outcomes["docs/broken.pdf"]["success"]
    assert "broken.pdf" in outcomes["docs/broken.pdf"]["error"]

    # A second shell with the same settings sees the same index.
    search = run_ctx(env, "search", "liquidated damages per business day", "-k", "3", "--json", check=True)
    hits = json.loads(search.stdout)
    assert len(hits) == 3
    top = hits[0]
    assert top["document"] == "docs/supply_agreement.pdf"
    assert set(top) >= {"document", "section_path", "page_start", "page_end", "text", "header", "score"}
    assert any("Penalties" in s for s in top["section_path"]) and top["page_start"] >= 1

    text = run_ctx(env, "search", "token bucket refill", "-k", "2", check=True)
    assert "rate_limiter.py" in text.stdout

    status = json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    assert status["header_source"] == "structural" and status["sources"] == 3
    (version,) = status["index_versions"]
    assert version["documents"] == 2 and version["index_version"] == status["current_index_version"]

    # The run is in the Dagster instance the UI reads: one run over the three partitions (pipelined),
    # failed because one document failed, with the two good partitions materialized and only those.
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        assert [r.status.value for r in runs] == ["FAILURE"]
        assert runs[0].tags["dagster/asset_partition_range_start"] == "docs/broken.pdf"
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        assert materialized == {"docs/supply_agreement.pdf", "docs/rate_limiter.py"}


def test_clear_errors_and_exit_codes(tmp_path, env):
    missing = run_ctx(env, "ingest", str(tmp_path / "nope.pdf"))
    assert missing.returncode != 0 and "no such file" in missing.stderr
    empty_index = run_ctx(env, "search", "anything")
    assert empty_index.returncode == 1 and "holds no chunks" in empty_index.stderr
    bad_source = run_ctx({**env, "CTX_HEADER_SOURCE": "gpt"}, "status")
    assert bad_source.returncode == 2 and "unknown header source 'gpt'" in bad_source.stderr
    usage = run_ctx(env, "frobnicate")
    assert usage.returncode == 2


def test_eval_promote_search_rollback(tmp_path, env, samples_dir):
    import json as _json

    corpus = tmp_path / "docs"
    copy_into([samples_dir / "employee_handbook.pdf", samples_dir / "rate_limiter.py"], corpus)
    run_ctx(env, "ingest", str(corpus), check=True)
    gold = tmp_path / "gold.jsonl"
    gold.write_text(_json.dumps({"query": "hotel limit per night in London",
                                 "evidence": [{"text": "EUR 210 per night in London"}]}) + "\n")
    evaluated = run_ctx(env, "eval", "--gold", str(gold))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "check eval_gate" in evaluated.stdout and "passed" in evaluated.stdout
    status = _json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    assert status["production"] == status["current_index_version"]
    hits = _json.loads(run_ctx(env, "search", "London hotel", "--json", check=True).stdout)
    assert hits[0]["index_version"] == status["production"]
    rollback = run_ctx(env, "rollback")
    assert rollback.returncode == 2 and "no previous version" in rollback.stderr


def test_colliding_keys_are_refused_not_merged(tmp_path):
    from contextual_assets.app.ingest_runs import collect_sources

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "report.md").write_text("# A\n")
    (tmp_path / "b" / "report.md").write_text("# B\n")
    inbox = tmp_path / "inbox"
    # Keys follow the files' paths: one name in two folders is two keys.
    sources, refused = collect_sources([tmp_path / "a" / "report.md", tmp_path / "b" / "report.md"], inbox=inbox,
                                       source_root=tmp_path)
    assert [k for k, _ in sources] == ["a/report.md", "b/report.md"] and refused == []
    # Two names that map to one key (NFC and NFD spellings): the second is refused, not merged.
    composed, decomposed = tmp_path / "a" / "caf\u00e9.md", tmp_path / "a" / "cafe\u0301.md"
    composed.write_text("# first\n")
    decomposed.write_text("# second\n")
    if len(os.listdir(tmp_path / "a")) != 3:
        pytest.fail("this file system folds Unicode normalization; the test needs two distinct names")
    sources, refused = collect_sources([composed, decomposed], inbox=inbox, source_root=tmp_path)
    assert sources == [("a/caf\u00e9.md", composed)]
    assert len(refused) == 1 and "same document key 'a/caf\u00e9.md'" in refused[0]
    # A key already registered to another file that still exists is not taken over.
    sources, refused = collect_sources([tmp_path / "b" / "report.md"], inbox=inbox, source_root=tmp_path / "b",
                                       registered={str((tmp_path / "a" / "report.md").resolve()): "report.md"})
    assert sources == []
    assert len(refused) == 1 and "same document key 'report.md'" in refused[0]


def test_database_password_stays_out_of_run_config(monkeypatch, settings_factory):
    from contextual_assets.defs.definitions import build_definitions
    from contextual_assets.store.postgres_store import redact_url

    monkeypatch.setenv("DATABASE_URL", "postgresql://ctx:S3CRET-pw@db.internal/ctx")
    settings = settings_factory(database_url="postgresql://ctx:S3CRET-pw@db.internal/ctx")
    defs = build_definitions(settings)
    from dagster._serdes import serialize_value

    snapshot = serialize_value(defs.resolve_job_def("ingest_documents").get_job_snapshot())
    assert "S3CRET" not in snapshot
    for url in ("postgresql://ctx:S3CRET-pw@db/ctx", "host=db password=S3CRET-pw dbname=ctx",
                "postgresql://ctx@db/ctx?password=S3CRET-pw"):
        assert "S3CRET" not in redact_url(url) and "db" in redact_url(url)


@pytest.mark.parametrize(("variable", "value"), [("CTX_CHUNK_TOKENS", "abc"), ("CTX_LLM_MAX_IN_FLIGHT", "-1")])
def test_a_bad_setting_exits_2_naming_the_variable(env, variable, value):
    result = run_ctx({**env, variable: value}, "status")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.startswith(f"error: {variable}={value!r} is not valid"), result.stderr
