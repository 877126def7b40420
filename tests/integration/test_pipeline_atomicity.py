"""Pipelined ingest keeps per-document atomicity: the process executing a run over many document
partitions is killed (SIGKILL) while documents are in every stage; the store then holds only whole
documents, exactly those the event log says were materialized, and a re-run completes without
asking the fleet again for headers of committed documents. The fleet is the simulator (bench/sim/)
because no GPU is here; everything else is real: `ctx ingest`, Dagster, DuckDB or Postgres."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from bench.corpora import CHUNK_TOKENS, expected_chunks, write_corpus
from bench.sim import SimFleet
from tests.support import REPO_ROOT

DOCUMENTS = 8


def _requests(sim: SimFleet) -> int:
    return sum(s["completed"] for s in sim.stats())


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_killed_pipelined_run_leaves_only_whole_documents(backend, tmp_path, request):
    import dagster as dg

    from contextual_assets.store import open_store

    docs = tmp_path / "docs"
    write_corpus(docs, DOCUMENTS)
    expected = expected_chunks(docs)
    assert all(n >= 3 for n in expected.values())
    database_url = request.getfixturevalue("pg_url") if backend == "postgres" else ""
    home = tmp_path / "dagster_home"
    # One request in flight per replica at a slow time scale: the run lasts long enough to be killed
    # with some documents committed and others still waiting for headers or embedding.
    sim = SimFleet.start(tmp_path, time_scale=4.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
    env.update({
        "CTX_HOME": str(tmp_path / ".ctx"), "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1",
        "CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": ",".join(sim.base_urls), "CTX_LLM_MAX_IN_FLIGHT": "1",
        "CTX_CHUNK_TOKENS": str(CHUNK_TOKENS), "DATABASE_URL": database_url, "CTX_SOURCE_ROOT": str(tmp_path),
    })
    command = [sys.executable, "-m", "contextual_assets.app.cli", "ingest", str(docs)]
    # The instance's storage exists before `ctx` starts, so polling it never races its creation.
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    dg.DagsterInstance.from_config(str(home)).dispose()
    try:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        committed: set[str] = set()
        while len(committed) < 2:
            assert proc.poll() is None, f"ingest ended before it could be killed:\n{proc.stdout.read().decode()[-3000:]}"
            assert time.monotonic() < deadline, "no document committed within 300 s"
            time.sleep(0.2)
            with dg.DagsterInstance.from_config(str(home)) as instance:
                committed = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        requests_at_kill = _requests(sim)

        with dg.DagsterInstance.from_config(str(home)) as instance:
            materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
            headered = instance.get_materialized_partitions(dg.AssetKey("chunk_headers"))
        assert 2 <= len(materialized) < DOCUMENTS, "the kill must land mid-run"

        store = open_store(database_url or None, tmp_path / ".ctx" / "index.duckdb")
        try:
            documents = {d.doc_id: d for d in store.corpus.documents()}
            # Only whole documents, exactly the materialized ones: nothing half-written, nothing orphaned.
            assert set(documents) == materialized
            for key, record in documents.items():
                assert record.n_chunks == expected[key]
                rows = [c for c in store.corpus.chunks(record.index_version) if c.doc_id == key]
                assert sorted(c.ordinal for c in rows) == list(range(expected[key]))
            assert store.corpus.count_chunks() == sum(expected[k] for k in documents)
            committed_chunks = store.corpus.count_chunks()
        finally:
            store.close()

        # A re-run completes; headers of committed documents come from the cache, not the fleet.
        rerun = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        rerun_requests = _requests(sim) - requests_at_kill
        assert rerun_requests <= sum(expected.values()) - committed_chunks
        assert len(headered) >= len(materialized)
        store = open_store(database_url or None, tmp_path / ".ctx" / "index.duckdb")
        try:
            assert {d.doc_id: d.n_chunks for d in store.corpus.documents()} == expected
            assert store.corpus.count_chunks() == sum(expected.values())
        finally:
            store.close()
    finally:
        sim.stop()
