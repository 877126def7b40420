"""Pipelined ingest keeps per-document atomicity: the process executing a run over many document
partitions is killed (SIGKILL) while some documents are committed and the others still wait for
header answers; the store then holds only whole documents, exactly those the event log says were
materialized, and a re-run completes without asking the fleet again for headers of committed
documents. The fleet is the simulator (bench/sim/) because no GPU is here; everything else is real:
`ctx ingest`, Dagster, DuckDB or Postgres.

The kill is placed by state, not by time, so that a loaded machine cannot move it: once two
documents have all their headers, the fleet stops answering (every new request stalls, through the
simulator's fault injection), and the process is killed when nothing can change any more: no
request left in the simulated engines, every headered document committed and logged, for a few
seconds. Whatever the CPU does to the parsing, embedding and commit stages, the documents behind
the stalled requests are still uncommitted at the kill, and no answer can arrive after it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from bench.corpora import CHUNK_TOKENS, expected_chunks, write_corpus
from bench.sim import SimFleet
from tests.support import REPO_ROOT

DOCUMENTS = 8
HEADERED_BEFORE_STALL = 2  # documents with all their headers when the fleet stops answering
STALL_S = 3600.0  # a stalled request is answered after this: never, within the test
SETTLE_S = 3.0  # the state before the kill holds this long, unchanged
POLL_S = 0.2
STATE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Observed:
    """The run as the test sees it: the event log and the simulator's accounting."""

    headered: frozenset[str]  # chunk_headers materialized
    committed: frozenset[str]  # chunk_embeddings materialized
    answered: int  # header requests the fleet answered
    open: int  # header requests the fleet holds (stalled or in its engines)
    in_engine: int  # of which running or waiting in the engines: they will be answered

    def __str__(self) -> str:
        return (f"headered {sorted(self.headered)}, committed {sorted(self.committed)}, answered {self.answered}, "
                f"open {self.open} ({self.in_engine} in the engines)")


def _requests(sim: SimFleet) -> int:
    return sum(s["completed"] for s in sim.stats())


def _set_faults(sim: SimFleet, **faults) -> None:
    for url in sim.admin_urls:
        httpx.post(f"{url}/faults", json=faults, timeout=10).raise_for_status()


def _observe(home: Path, sim: SimFleet) -> Observed:
    import dagster as dg

    stats = sim.stats()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        headered = instance.get_materialized_partitions(dg.AssetKey("chunk_headers"))
        committed = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
    return Observed(frozenset(headered), frozenset(committed), sum(s["completed"] for s in stats),
                    sum(s["open_requests"] for s in stats), sum(s["running"] + s["waiting"] for s in stats))


def _header_stats(home: Path, sim: SimFleet) -> str:
    """Per run and document, the header requests the client counted (for a failure message), and the
    simulator's accounting per replica."""
    import dagster as dg

    keys = ("chunks", "requests", "cache_hits", "retries", "failovers", "hedges")
    lines = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey("chunk_headers"), limit=1000).records
        for record in sorted(records, key=lambda r: r.timestamp):
            metadata = record.asset_materialization.metadata
            values = {k: getattr(metadata.get(k), "value", None) for k in keys}
            lines.append(f"run {record.run_id[:8]} {record.partition_key}: {values}")
    fields = ("completed", "aborted", "stalls_injected", "open_requests", "rejected", "dropped", "max_lag_s")
    lines += [str({k: s.get(k) for k in fields}) for s in sim.stats()]
    return "\n".join(lines)


def _log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _wait_for(proc: subprocess.Popen, log: Path, home: Path, sim: SimFleet, what: str, condition,
              settle_s: float = 0.0) -> Observed:
    """Poll until `condition(observed)` holds, and (with `settle_s`) has held unchanged that long."""
    deadline = time.monotonic() + STATE_TIMEOUT_S
    held_since, held = None, None
    while True:
        assert proc.poll() is None, f"ingest ended before {what}:\n{_log_tail(log)}"
        observed = _observe(home, sim)
        now = time.monotonic()
        if condition(observed):
            state = (observed.headered, observed.committed, observed.answered)
            if state != held:
                held_since, held = now, state
            if now - held_since >= settle_s:
                return observed
        else:
            held_since = held = None
        assert now < deadline, f"not {what} within {STATE_TIMEOUT_S} s; last seen: {observed}\n{_log_tail(log)}"
        time.sleep(POLL_S)


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
    # One request in flight per replica at a slow time scale: documents get their headers one after
    # another, so two are headered long before the last.
    sim = SimFleet.start(tmp_path, time_scale=4.0)
    # No hedges and no client timeout while the test holds the fleet: every answer the simulator
    # counts is one chunk's header, and a stalled request stays open until the kill.
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({
        "replicas": [{"base_url": url, "max_in_flight": 1} for url in sim.base_urls],
        "hedge": False, "request_timeout_s": STALL_S,
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
    env.update({
        "CTX_HOME": str(tmp_path / ".ctx"), "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1",
        "CTX_HEADER_SOURCE": "openai", "CTX_LLM_FLEET_FILE": str(fleet_file),
        "CTX_CHUNK_TOKENS": str(CHUNK_TOKENS), "DATABASE_URL": database_url, "CTX_SOURCE_ROOT": str(tmp_path),
    })
    command = [sys.executable, "-m", "contextual_assets.cli.main", "ingest", str(docs)]
    # The instance's storage exists before `ctx` starts, so polling it never races its creation.
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    dg.DagsterInstance.from_config(str(home)).dispose()
    log = tmp_path / "ingest.log"
    proc = None
    try:
        with log.open("wb") as out:  # a file, not a pipe: a full pipe would block the run
            proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _wait_for(proc, log, home, sim, f"{HEADERED_BEFORE_STALL} documents headered",
                  lambda o: len(o.headered) >= HEADERED_BEFORE_STALL)
        _set_faults(sim, stall_s=STALL_S, stall_rate=1.0)
        # Nothing left to answer in the engines (no header can arrive any more), and every headered
        # document committed and in the event log (no commit under way), unchanged for SETTLE_S.
        at_kill = _wait_for(proc, log, home, sim, "quiet with every headered document committed",
                            lambda o: o.in_engine == 0 and o.headered == o.committed, settle_s=SETTLE_S)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # The kill landed mid-run: documents committed, others still waiting for their headers.
        assert HEADERED_BEFORE_STALL <= len(at_kill.committed) < DOCUMENTS, f"the kill must land mid-run: {at_kill}"
        assert len(at_kill.headered) < DOCUMENTS and at_kill.open > 0, \
            f"the kill must land while header requests are outstanding: {at_kill}"
        # The killed process's requests are cut short at the simulator (aborted, never answered).
        deadline = time.monotonic() + 60
        while any(s["open_requests"] for s in sim.stats()):
            assert time.monotonic() < deadline, f"requests of the killed run still open: {sim.stats()}"
            time.sleep(POLL_S)
        requests_at_kill = _requests(sim)
        assert requests_at_kill == at_kill.answered, "an answer arrived after the state the kill was placed in"
        _set_faults(sim, stall_s=0.0)

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

        # A re-run completes; headers of committed documents come from the cache, not the fleet, and
        # the headers the kill left unanswered are asked for.
        rerun = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        rerun_requests = _requests(sim) - requests_at_kill
        assert 0 < rerun_requests <= sum(expected.values()) - committed_chunks, \
            f"{rerun_requests} requests after the kill state {at_kill}\n{_header_stats(home, sim)}"
        assert len(headered) >= len(materialized)
        store = open_store(database_url or None, tmp_path / ".ctx" / "index.duckdb")
        try:
            assert {d.doc_id: d.n_chunks for d in store.corpus.documents()} == expected
            assert store.corpus.count_chunks() == sum(expected.values())
        finally:
            store.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        sim.stop()
