"""`ctx` as a user runs it: a subprocess with settings from the environment."""

from __future__ import annotations

import json
import os
import re
import socket

import pytest

from tests.support import copy_into, run_ctx

# A line a logging handler wrote (`DEBUG:bm25s:...`, or Dagster's `... - dagster - INFO - ...`).
LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\s]|\s-\s(DEBUG|INFO|WARNING|ERROR)\s-\s", re.MULTILINE)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: connections are refused


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
    answer = json.loads(search.stdout)
    assert answer["mode"] == "hybrid" and answer["reranked"] is False and answer["took_ms"] >= 0
    hits = answer["hits"]
    assert len(hits) == 3 and {h["index_version"] for h in hits} == {answer["index_version"]}
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
    # Nothing is promoted: the current version is the candidate, with what it covers of the 3 live files.
    assert status["production"] is None and status["fleet"] is None
    assert status["candidate"] == {"index_version": version["index_version"], "coverage": version["coverage"]}
    assert version["coverage"]["covered"] == 2 and version["coverage"]["live"] == 3

    # The run is in the Dagster instance the UI reads: one run over the three partitions (pipelined),
    # failed because one document failed, with the two good partitions materialized and only those.
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        assert [r.status.value for r in runs] == ["FAILURE"]
        assert runs[0].tags["dagster/asset_partition_range_start"] == "docs/broken.pdf"
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        assert materialized == {"docs/supply_agreement.pdf", "docs/rate_limiter.py"}

    # The gate blocks a candidate that misses a live document (broken.pdf): exit 1, production unchanged.
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"query": "liquidated damages per business day", "evidence": [
        {"text": "the Supplier shall pay liquidated damages of 0.5 percent of the Milestone Fee"}]}) + "\n")
    blocked = run_ctx(env, "eval", "--gold", str(gold), "--json")
    assert blocked.returncode == 1, blocked.stderr[-2000:]
    report = json.loads(blocked.stdout)
    assert report["candidate"] == version["index_version"] and report["evaluated"]
    assert not report["gate_passed"] and not report["promoted"] and report["error"] is None
    assert report["production_before"] is None and report["production_after"] is None
    assert "broken.pdf" in report["gate_reasons"]
    gate = next(c for c in report["checks"] if c["name"] == "eval_gate")
    assert gate["passed"] is False and gate["severity"] == "ERROR"
    assert gate["metadata"]["candidate_version"] == version["index_version"]


def test_clear_errors_and_exit_codes(tmp_path, env):
    missing = run_ctx(env, "ingest", str(tmp_path / "nope.pdf"))
    assert missing.returncode == 1 and "no such file" in missing.stderr
    no_gold = run_ctx(env, "eval", "--gold", str(tmp_path / "nope.jsonl"))
    assert no_gold.returncode == 2 and no_gold.stderr == f"error: gold file {tmp_path / 'nope.jsonl'} not found\n"
    unset_gold = run_ctx(env, "eval")
    assert unset_gold.returncode == 2 and "CTX_GOLD_FILE" in unset_gold.stderr
    empty_index = run_ctx(env, "search", "anything")
    assert empty_index.returncode == 1 and "holds no chunks" in empty_index.stderr
    bad_source = run_ctx({**env, "CTX_HEADER_SOURCE": "gpt"}, "status")
    assert bad_source.returncode == 2 and "unknown header source 'gpt'" in bad_source.stderr
    usage = run_ctx(env, "frobnicate")
    assert usage.returncode == 2
    # A search service that does not answer is a dependency down (3), not a usage error.
    down = run_ctx({**env, "CTX_SEARCH_URL": f"http://127.0.0.1:{_dead_port()}"}, "search", "anything")
    assert down.returncode == 3 and "unreachable" in down.stderr and "CTX_SEARCH_URL" in down.stderr


def test_a_database_that_is_down_exits_3_naming_the_variable(env):
    # psycopg's pool retries for its 30 s timeout before giving up; its per-attempt warnings stay quiet.
    result = run_ctx({**env, "DATABASE_URL": f"postgresql://ctx@127.0.0.1:{_dead_port()}/ctx"}, "status")
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: cannot connect to Postgres") and "DATABASE_URL" in result.stderr
    assert result.stdout == ""


def test_status_shows_the_fleet_and_a_down_replica_stops_ingest(tmp_path, env):
    from bench.sim import FleetSimulator

    doc = tmp_path / "note.md"
    doc.write_text("# Note\n\nBerth 4 takes vessels up to 180 metres.\n")
    dead = f"http://127.0.0.1:{_dead_port()}/v1"
    with FleetSimulator(1, time_scale=0.01) as sim:
        fleet_env = {**env, "CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": f"{sim.base_urls[0]},{dead}"}
        status = run_ctx(fleet_env, "status", "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        up, down = report["fleet"]
        assert up["base_url"] == sim.base_urls[0] and up["reachable"] and up["models"]
        assert up["running"] == 0 and up["waiting"] == 0, "the simulator's /metrics gauges, idle"
        assert down["base_url"] == dead and not down["reachable"] and down["error"]
        assert report["current_index_version"] is None and dead in report["header_warning"]
        text = run_ctx(fleet_env, "status", check=True).stdout
        assert f"{dead}  DOWN" in text and f"{sim.base_urls[0]}  up" in text

        ingest = run_ctx(fleet_env, "ingest", str(doc))
        assert ingest.returncode == 3, ingest.stderr
        assert ingest.stderr.startswith("error: ") and dead in ingest.stderr
        assert sim.stats()[0]["completed"] == 0, "nothing ran against the half-down fleet"


def test_library_logs_never_reach_stdout(tmp_path, env):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nThe hotel limit is EUR 210 per night in London.\n")
    # -v turns Dagster's run logs on (DEBUG): they go to stderr, like every library's.
    ingest = run_ctx(env, "ingest", "-v", str(folder))
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    assert LOG_LINE.search(ingest.stderr), "the run's logs were shown (on stderr)"
    assert not LOG_LINE.search(ingest.stdout), ingest.stdout
    assert ingest.stdout.startswith("1 ingested, 0 failed;") and ingest.stdout.count("\n") == 1, ingest.stdout
    status = run_ctx(env, "status", check=True)
    assert not LOG_LINE.search(status.stdout), status.stdout
    search = run_ctx(env, "search", "hotel limit London", "--json", check=True)
    assert not LOG_LINE.search(search.stdout) and json.loads(search.stdout)["hits"]


def ingested_with_gold(tmp_path, env, samples_dir):
    """Two sample documents ingested with `ctx ingest`, and a one-task gold file the handbook answers."""
    corpus = tmp_path / "docs"
    copy_into([samples_dir / "employee_handbook.pdf", samples_dir / "rate_limiter.py"], corpus)
    run_ctx(env, "ingest", str(corpus), check=True)
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"query": "hotel limit per night in London",
                                "evidence": [{"text": "EUR 210 per night in London"}]}) + "\n")
    return gold


def test_two_evaluations_of_one_candidate_both_pass_and_production_moves_once(tmp_path, env, samples_dir):
    """Two `ctx eval` of the same candidate started together: whichever promotes first, the other ends
    with exit 0 and "already production" (or evaluates once more after the move), never a failed gate."""
    from concurrent.futures import ThreadPoolExecutor

    gold = ingested_with_gold(tmp_path, env, samples_dir)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: run_ctx(env, "eval", "--gold", str(gold), "--json"), range(2)))
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    reports = [json.loads(r.stdout) for r in runs]
    candidate = reports[0]["candidate"]
    assert all(r["candidate"] == candidate == r["production_after"] and r["gate_passed"] for r in reports)
    assert sorted(r["promotion"] for r in reports) == ["already production", "promoted"], reports
    import duckdb

    with duckdb.connect(str(tmp_path / ".ctx" / "index.duckdb"), read_only=True) as db:
        history = db.execute("SELECT action, index_version FROM ctx_alias_history WHERE name = 'production'").fetchall()
    assert history == [("promote", candidate)], "production moved once"


def test_eval_promote_search_rollback(tmp_path, env, samples_dir):
    import json as _json

    gold = ingested_with_gold(tmp_path, env, samples_dir)
    evaluated = run_ctx(env, "eval", "--gold", str(gold))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "check eval_gate" in evaluated.stdout and "passed" in evaluated.stdout
    assert "production -> " in evaluated.stdout
    status = _json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    assert status["production"] == status["current_index_version"]
    answer = _json.loads(run_ctx(env, "search", "London hotel", "--json", check=True).stdout)
    assert answer["index_version"] == answer["hits"][0]["index_version"] == status["production"]
    assert answer["alias"] == "production", "served through the production alias"
    rollback = run_ctx(env, "rollback")
    assert rollback.returncode == 2 and "no previous version" in rollback.stderr

    # Evaluated again, the candidate is production already: the gate passes, exit 0, one JSON object.
    again = run_ctx(env, "eval", "--gold", str(gold), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    report = _json.loads(again.stdout)
    assert report["candidate"] == status["production"] == report["production_before"] == report["production_after"]
    assert report["gate_passed"] and report["promoted"] and report["error"] is None
    assert {c["name"] for c in report["checks"]} >= {"eval_gate", "gold_hygiene", "header_diagnostics"}
    assert all(isinstance(c["passed"], bool) and c["severity"] in ("ERROR", "WARN") for c in report["checks"])
    assert report["metrics"]["hybrid_pass_at_10"] == 1.0 and "coverage_share" in report["metrics"]
    assert report["comparison"].startswith("**Gate passed**")

    # The gate reranks with an endpoint that does not answer: a dependency is down, exit 3, not 2.
    from tests.support import free_port

    rerank_down = {**env, "CTX_GATE_RERANK": "1", "CTX_RERANK_MODEL": "reranker",
                   "CTX_RERANK_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}
    down = run_ctx(rerank_down, "eval", "--gold", str(gold), "--json")
    assert down.returncode == 3, (down.returncode, down.stdout[-1000:], down.stderr[-2000:])
    assert "unreachable" in _json.loads(down.stdout)["error"]


def test_colliding_keys_are_refused_not_merged(tmp_path):
    from contextual_assets.cli.ingest_runs import collect_sources

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
    from contextual_assets.definitions import build_definitions
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
