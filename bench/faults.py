"""Fault-injection bench: real ingests (`ctx ingest` subprocesses -> Dagster -> store) against the
fleet simulator with injected faults, each scenario checked for lost chunks, duplicates, partial
documents and LLM calls re-spent.

    python -m bench.faults --json bench/out/faults.json [--only NAME[,NAME]] [--keep]

Scenarios (names for --only): replica_killed, all_replicas_down, errors_5xx, slow_replica,
stalled_replica, slow_tail, malformed, worker_sigkill, concurrent_runs_duckdb,
concurrent_runs_postgres, same_document_twice, postgres_restart; and in bench/fault_crashes.py:
killed_in_commit_duckdb, killed_in_commit_postgres, killed_runs_then_sensor, emptied_inbox,
shared_header_cache.

Everything is real except the LLM fleet (bench/sim/fleet.py): the ingest is the `ctx` command line,
Dagster runs in its own DAGSTER_HOME, the store is DuckDB or Postgres (pgserver). Columns:

* chunks_expected: chunks of the documents the scenario expects to be committed at the end;
* chunks_committed: chunk rows in the store (all index versions);
* chunks_lost: expected chunks of documents that should have committed but are missing;
* duplicates: rows beyond one per (doc_id, ordinal, index_version);
* llm_calls_respent: completed LLM requests beyond the chunks that needed a header (for
  worker_sigkill: requests of the re-run beyond the chunks whose header was not cached);
* figures (JSON only, some scenarios): measured numbers, e.g. for stalled_replica and slow_tail the
  header phase against the healthy fleet's, the hedges the product counted in its `chunk_headers`
  metadata (`hedges`, `hedge_wins`; 0 when absent), the simulator's aborted requests (clients that
  went away: cancelled hedge losers, timeouts) and each replica's peak of open requests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpora import CHUNK_TOKENS, expected_chunks, write_corpus
from bench.sim import FaultConfig, FleetSimulator, ReplicaSpec, SimFleet

REPO_ROOT = Path(__file__).resolve().parent.parent
# A header the simulator writes (header_sentence); every malformed answer mode breaks this shape.
SIM_HEADER = re.compile(r"^This passage \(ref [0-9a-f]{6}\) covers [^<>{}]{0,200}\.$")


# ---------------------------------------------------------------- fleet

class Fleet:
    """The simulator in this process (its own thread and event loop): this process only waits on
    the `ctx ingest` subprocesses, and kill / restart / stats work on a dead replica too (its admin
    endpoint dies with it)."""

    def __init__(self, workdir: Path, speeds: list[float], time_scale: float, faults: dict | None = None,
                 max_num_seqs: int = 64):
        faults = faults or {}
        specs = [ReplicaSpec(speed=speed, max_num_seqs=max_num_seqs, faults=FaultConfig(**faults.get(i, {})))
                 for i, speed in enumerate(speeds)]
        self.sim = FleetSimulator(specs, time_scale=time_scale).start()
        self.base_urls: list[str] = self.sim.base_urls

    def stats(self) -> list[dict]:
        return self.sim.stats()

    def completed(self) -> int:
        return sum(s["completed"] for s in self.stats())

    def set_faults(self, i: int, **faults) -> None:
        self.sim.set_faults(i, **faults)

    def kill(self, i: int) -> None:
        self.sim.kill(i)

    def restart(self, i: int) -> None:
        self.sim.restart(i)

    def stop(self) -> None:
        self.sim.stop()

    def write_fleet_file(self, path: Path, max_in_flight: int, **fleet) -> Path:
        import yaml

        data = {"replicas": [{"base_url": u, "max_in_flight": max_in_flight} for u in self.base_urls], **fleet}
        path.write_text(yaml.safe_dump(data))
        return path


# ---------------------------------------------------------------- ctx ingest

@dataclass
class Env:
    workdir: Path
    database_url: str = ""
    home_name: str = "dagster_home"
    extra: dict = field(default_factory=dict)

    @property
    def ctx_home(self) -> Path:
        return self.workdir / ".ctx"

    @property
    def dagster_home(self) -> Path:
        return self.workdir / self.home_name

    def prepare(self) -> None:
        import dagster as dg

        if not self.dagster_home.exists():
            self.dagster_home.mkdir(parents=True)
            shutil.copyfile(REPO_ROOT / "dagster.yaml", self.dagster_home / "dagster.yaml")
            dg.DagsterInstance.from_config(str(self.dagster_home)).dispose()

    def environ(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
        env.update({
            "CTX_HOME": str(self.ctx_home), "DAGSTER_HOME": str(self.dagster_home), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "CTX_HEADER_SOURCE": "openai",
            "CTX_CHUNK_TOKENS": str(CHUNK_TOKENS), "DATABASE_URL": self.database_url,
            # Folders under the work directory are keyed `<folder>/<file>` (see `expected_chunks`).
            "CTX_SOURCE_ROOT": str(self.workdir),
        })
        env.update({k: str(v) for k, v in self.extra.items()})
        return env

    def start(self, *paths: Path) -> subprocess.Popen:
        self.prepare()
        return subprocess.Popen([sys.executable, "-m", "contextual_assets.app.cli", "ingest", "--json", *map(str, paths)],
                                cwd=REPO_ROOT, env=self.environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def store(self):
        from contextual_assets.store import open_store

        return open_store(self.database_url or None, self.ctx_home / "index.duckdb")

    def committed_partitions(self) -> set[str]:
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.dagster_home)) as instance:
            return set(instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings")))


@dataclass
class Ingest:
    rc: int
    outcomes: list[dict]
    stdout: str
    stderr: str
    wall_s: float

    @property
    def failed(self) -> dict[str, str]:
        return {o["key"]: o.get("error") or "" for o in self.outcomes if not o["success"]}

    @property
    def succeeded(self) -> set[str]:
        return {o["key"] for o in self.outcomes if o["success"]}

    def tail(self) -> str:
        return (self.stdout[-1500:] + "\n" + self.stderr[-1500:]).strip()


def finish(proc: subprocess.Popen, started: float, timeout: float = 300) -> Ingest:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    try:
        outcomes = json.loads(out) if out.strip() else []
    except json.JSONDecodeError:
        outcomes = []
    return Ingest(proc.returncode, outcomes, out, err, time.monotonic() - started)


def ingest(env: Env, *paths: Path, timeout: float = 300) -> Ingest:
    started = time.monotonic()
    return finish(env.start(*paths), started, timeout)


def wait_until(predicate: Callable[[], bool], proc: subprocess.Popen | None, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"ingest ended (rc {proc.returncode}) before {what}: {(out + err)[-400:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# ---------------------------------------------------------------- store checks

@dataclass
class StoreState:
    documents: dict[str, int]  # doc_id -> n_chunks (per index version summed by doc)
    rows: dict[str, int]  # doc_id -> chunk rows
    ordinals_ok: dict[str, bool]
    duplicates: int
    committed: int
    versions: int
    headers: list[str]
    cache_rows: int


def store_state(env: Env) -> StoreState:
    store = env.store()
    try:
        documents: dict[str, int] = {}
        for record in store.corpus.documents():
            documents[record.doc_id] = documents.get(record.doc_id, 0) + record.n_chunks
        rows: dict[str, int] = {}
        ordinals: dict[str, list[int]] = {}
        for doc_id, ordinal in store.backend.query("SELECT doc_id, ordinal FROM ctx_chunks"):
            rows[doc_id] = rows.get(doc_id, 0) + 1
            ordinals.setdefault(doc_id, []).append(ordinal)
        duplicates = store.backend.query(
            "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM ctx_chunks "
            "GROUP BY doc_id, ordinal, index_version) AS g")[0][0]
        versions = store.backend.query("SELECT COUNT(DISTINCT index_version) FROM ctx_chunks")[0][0]
        headers = [r[0] or "" for r in store.backend.query("SELECT header FROM ctx_chunks")]
        cache_rows = store.backend.query("SELECT COUNT(*) FROM ctx_header_cache")[0][0]
        return StoreState(
            documents=documents, rows=rows,
            ordinals_ok={d: sorted(o) == list(range(len(o))) for d, o in ordinals.items()},
            duplicates=int(duplicates or 0), committed=sum(rows.values()), versions=int(versions or 0),
            headers=headers, cache_rows=int(cache_rows or 0),
        )
    finally:
        store.close()


def whole_documents_problems(state: StoreState, expected: dict[str, int]) -> list[str]:
    """Every stored document is whole: its n_chunks is the expected count, its rows 0..n-1."""
    problems = []
    for doc_id, n in state.documents.items():
        if doc_id in expected and n != expected[doc_id]:
            problems.append(f"{doc_id}: n_chunks {n} != {expected[doc_id]}")
        if state.rows.get(doc_id, 0) != n:
            problems.append(f"{doc_id}: {state.rows.get(doc_id, 0)} rows for n_chunks {n} (partial document)")
        if not state.ordinals_ok.get(doc_id, n == 0):
            problems.append(f"{doc_id}: ordinals not 0..n-1")
    for doc_id in set(state.rows) - set(state.documents):
        problems.append(f"{doc_id}: {state.rows[doc_id]} orphan rows")
    return problems


def lost(state: StoreState, expected: dict[str, int], should_commit) -> int:
    return sum(n for k, n in expected.items() if k in should_commit and state.rows.get(k, 0) < n)


# ---------------------------------------------------------------- results

@dataclass
class Result:
    name: str
    passed: bool = False
    chunks_expected: int = 0
    chunks_committed: int = 0
    chunks_lost: int = 0
    duplicates: int = 0
    llm_calls_respent: int = 0
    detail: str = ""
    checks: list[tuple[str, bool]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # measured numbers, written to the JSON

    def check(self, label: str, ok: bool) -> bool:
        self.checks.append((label, bool(ok)))
        return ok

    def settle(self, state: StoreState, expected: dict[str, int], should_commit, extra: str = "") -> None:
        self.chunks_expected = sum(expected[k] for k in should_commit)
        self.chunks_committed = state.committed
        self.chunks_lost = lost(state, expected, should_commit)
        self.duplicates = state.duplicates
        problems = whole_documents_problems(state, expected)
        self.check("no partial document", not problems)
        self.check("nothing lost", self.chunks_lost == 0)
        self.check("no duplicates", self.duplicates == 0)
        bad_headers = [h for h in state.headers if not SIM_HEADER.match(h)]
        self.check("every stored header is a valid answer", not bad_headers)
        failed = [label for label, ok in self.checks if not ok]
        self.passed = not failed
        parts = [extra] if extra else []
        if failed:
            parts.append("FAILED: " + "; ".join(failed))
        if problems:
            parts.append("problems: " + "; ".join(problems[:3]))
        if bad_headers:
            parts.append(f"bad header e.g. {bad_headers[0][:80]!r}")
        self.detail = " | ".join(parts)

    def row(self) -> dict:
        return {"name": self.name, "passed": self.passed, "chunks_expected": self.chunks_expected,
                "chunks_committed": self.chunks_committed, "chunks_lost": self.chunks_lost,
                "duplicates": self.duplicates, "llm_calls_respent": self.llm_calls_respent, "detail": self.detail,
                "figures": self.figures}


# ---------------------------------------------------------------- scenarios

def fleet_env(workdir: Path, fleet: Fleet, max_in_flight: int, database_url: str = "", **fleet_settings) -> Env:
    fleet_file = fleet.write_fleet_file(workdir / f"fleet-{time.monotonic_ns()}.yaml", max_in_flight,
                                        **fleet_settings)
    return Env(workdir, database_url, extra={"CTX_LLM_FLEET_FILE": str(fleet_file)})


def scenario_replica_killed(ctx: Context, n_docs: int = 8) -> Result:
    """One replica of three killed mid-run: the run completes on the others, nothing lost."""
    r = Result("replica_killed")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    fleet = Fleet(ctx.workdir, [1, 1, 1], time_scale=1.0)
    try:
        env = fleet_env(ctx.workdir, fleet, 2, database_url=ctx.db_url())
        started = time.monotonic()
        proc = env.start(docs)
        wait_until(lambda: fleet.completed() >= total // 4, proc, 240, "a quarter of the headers")
        fleet.kill(0)
        at_kill = fleet.stats()[0]["completed"]
        res = finish(proc, started)
        stats = fleet.stats()
        r.check(f"run completes (rc {res.rc})", res.rc == 0 and not res.failed)
        r.check("killed replica answered nothing after the kill", stats[0]["completed"] == at_kill)
        r.llm_calls_respent = max(0, sum(s["completed"] for s in stats) - total)
        r.settle(store_state(env), expected, set(expected),
                 f"killed replica 0 after {at_kill} answers; shares {[s['completed'] for s in stats]}; "
                 f"wall {res.wall_s:.1f}s" + ("" if res.rc == 0 else f"; {res.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


def scenario_all_replicas_down(ctx: Context, n_docs: int = 8, unavailable_s: float = 5.0) -> Result:
    """Every replica killed mid-run: affected partitions fail with a clear error in bounded time, no
    partial document; after the replicas restart a re-run completes."""
    r = Result("all_replicas_down")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=1.0)
    try:
        env = fleet_env(ctx.workdir, fleet, 2, database_url=ctx.db_url(), unavailable_timeout_s=unavailable_s,
                        breaker_cooldown_s=1.0, request_timeout_s=10.0)
        started = time.monotonic()
        proc = env.start(docs)
        wait_until(lambda: fleet.completed() >= total // 4, proc, 240, "a quarter of the headers")
        fleet.kill(0)
        fleet.kill(1)
        killed_at = time.monotonic()
        res = finish(proc, started)
        after_kill = time.monotonic() - killed_at
        bound = unavailable_s + 60.0
        r.check(f"run ends with failed partitions (rc {res.rc})", res.rc == 1 and res.failed)
        r.check(f"failure within {bound:.0f}s of the outage (took {after_kill:.1f}s)", after_kill < bound)
        clear = all(re.search(r"replica|unavailable|fleet|connect", e, re.IGNORECASE) for e in res.failed.values())
        r.check("each failure names the fleet outage", clear)
        state = store_state(env)
        failed_stored = [k for k in res.failed if state.rows.get(k)]
        r.check("no failed partition has rows", not failed_stored)
        first_error = next(iter(res.failed.values()), "")
        outage = (f"{len(res.succeeded)} committed, {len(res.failed)} failed {after_kill:.1f}s after the outage; "
                  f"error: {first_error[:160]!r}")
        before_rerun = fleet.completed()
        fleet.restart(0)
        fleet.restart(1)
        wait_until(lambda: all(s["alive"] for s in fleet.stats()), None, 30, "replicas to restart")
        rerun = ingest(env, docs)
        r.check(f"re-run after recovery completes (rc {rerun.rc})", rerun.rc == 0 and not rerun.failed)
        r.llm_calls_respent = max(0, fleet.completed() - before_rerun
                                  - (total - sum(expected[k] for k in res.succeeded)))
        r.settle(store_state(env), expected, set(expected),
                 outage + ("" if rerun.rc == 0 else f"; re-run: {rerun.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


def scenario_errors_5xx(ctx: Context, n_docs: int = 8) -> Result:
    """10 % of requests answer HTTP 500: the run completes."""
    r = Result("errors_5xx")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    faults = {i: {"error_rate": 0.1} for i in range(3)}
    fleet = Fleet(ctx.workdir, [1, 1, 1], time_scale=0.5, faults=faults)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        res = ingest(env, docs)
        stats = fleet.stats()
        errors = sum(s.get("errors_injected", 0) for s in stats)
        r.check(f"run completes (rc {res.rc})", res.rc == 0 and not res.failed)
        r.llm_calls_respent = max(0, sum(s["completed"] for s in stats) - total)
        r.settle(store_state(env), expected, set(expected),
                 f"{sum(s['completed'] for s in stats)} answers, 5xx injected {errors}; wall {res.wall_s:.1f}s"
                 + ("" if res.rc == 0 else f"; {res.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


def _floor(workdir: Path, docs: Path, time_scale: float, cap: int) -> float:
    """Wall seconds of the same header requests sent straight to three healthy replicas."""
    from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.pool import HeaderFleet
    from contextual_assets.headers.budget import fit_prompt
    from contextual_assets.headers.context import header_requests
    from contextual_assets.headers.openai_source import OpenAIHeaderSource
    from contextual_assets.headers.prompt import DEFAULT_PROMPT, load_prompt
    from contextual_assets.ingest.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter
    from contextual_assets.settings import PlatformSettings

    counter = token_counter()
    settings = PlatformSettings()
    # The simulator in its own process (off this process's GIL), for the floor measurement.
    fleet_sim = SimFleet.start(workdir, time_scale, speeds=[1, 1, 1], max_num_seqs=64)
    client = HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=cap)
                                               for u in fleet_sim.base_urls]), discovery=ModelDiscovery())
    try:
        source = OpenAIHeaderSource(client, load_prompt(DEFAULT_PROMPT), counter)
        requests = []
        for path in sorted(docs.iterdir()):
            doc = parse_document(f"{docs.name}/{path.name}", path, counter, chunk_tokens=CHUNK_TOKENS,
                                 max_bytes=10**8, max_pdf_pages=10)
            for request in header_requests(doc, counter, settings.context_tokens):
                fitted = fit_prompt(request, source.prompt, counter, context_limit=client.context_limit,
                                    max_output_tokens=source.max_output_tokens, safety=source.token_safety)
                requests.append(source._single(request, fitted))
        started = time.monotonic()
        results = client.run(requests)
        wall = time.monotonic() - started
        failed = [x for x in results if isinstance(x, BaseException)]
        if failed:
            raise RuntimeError(f"floor: {len(failed)} requests failed: {failed[0]}")
        return wall
    finally:
        client.close()
        fleet_sim.stop()


def _header_wall(env: Env, run_id: str) -> float:
    """Seconds of the run's header phase: its first document parsed to its last document headered
    (what routing decides; process start-up and the embedding tail are not the fleet's)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        times = {"parsed_chunks": [], "chunk_headers": []}
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            key = record.dagster_event.asset_key.to_user_string()
            if key in times:
                times[key].append(record.timestamp)
        return float(max(times["chunk_headers"]) - min(times["parsed_chunks"]))


def _run_ids(res: Ingest) -> set[str]:
    return {o["run_id"] for o in res.outcomes if o.get("run_id")}


def _ingest_header_wall(env: Env, res: Ingest) -> float:
    """The header phase of every run of one `ctx ingest`, summed (the process wall if it reported no run)."""
    run_ids = _run_ids(res)
    return sum(_header_wall(env, run_id) for run_id in run_ids) if run_ids else res.wall_s


def _header_counts(env: Env, run_ids: set[str], keys: tuple[str, ...] = ("hedges", "hedge_wins")) -> dict[str, int]:
    """Integer metadata `keys` of the runs' `chunk_headers` materializations, summed; a key a
    materialization lacks counts 0 (a product that does not hedge reports nothing)."""
    import dagster as dg

    totals = dict.fromkeys(keys, 0)
    headers_key = dg.AssetKey("chunk_headers")
    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        for run_id in run_ids:
            for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
                materialization = record.asset_materialization
                if materialization is None or materialization.asset_key != headers_key:
                    continue
                for key in keys:
                    value = getattr(materialization.metadata.get(key), "value", None)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        totals[key] += int(value)
    return totals


def scenario_slow_replica(ctx: Context, n_docs: int = 8, time_scale: float = 3.0, cap: int = 2) -> Result:
    """One replica of four 10x slower: routing avoids it; the run is within 1.3x of the floor of the
    three healthy replicas."""
    r = Result("slow_replica")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    floor = _floor(ctx.workdir, docs, time_scale, cap)
    fleet = Fleet(ctx.workdir, [1, 1, 1, 0.1], time_scale=time_scale)
    try:
        env = fleet_env(ctx.workdir, fleet, cap, database_url=ctx.db_url())
        res = ingest(env, docs)
        stats = fleet.stats()
        r.check(f"run completes (rc {res.rc})", res.rc == 0 and not res.failed)
        wall = _ingest_header_wall(env, res)
        share = stats[3]["completed"] / max(1, sum(s["completed"] for s in stats))
        r.check(f"run wall {wall:.1f}s within 1.3x of the floor {floor:.1f}s", wall <= 1.3 * floor)
        r.check(f"slow replica share {share:.0%} at most its capacity share (0.1/3.1 = 3%) + 5%", share <= 0.08)
        r.llm_calls_respent = max(0, sum(s["completed"] for s in stats) - total)
        r.settle(store_state(env), expected, set(expected),
                 f"run {wall:.1f}s vs floor {floor:.1f}s ({wall / floor:.2f}x); answers per replica "
                 f"{[s['completed'] for s in stats]}" + ("" if res.rc == 0 else f"; {res.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


# The tail scenarios' fleet: four equal replicas, `TAIL_CAP` requests in flight each. At time_scale
# 2.5 one request (~550 prompt + ~50 output tokens) takes about 1 s wall, the healthy header phase
# of 40 documents about 20 s, and a 20x slower replica holds a request about 20 s.
TAIL_SPEEDS = (1.0, 1.0, 1.0, 1.0)
TAIL_CAP = 4
TAIL_BOUND = 1.25  # header phase under the fault / on the healthy fleet


@dataclass
class CompletionTrigger:
    """Calls `apply` once, from its own thread, when the fleet has completed `threshold` requests:
    a fault for the tail of a run, whatever its pace."""

    fleet: Fleet
    threshold: int
    apply: Callable[[], None]
    poll_s: float = 0.05
    fired_after_s: float | None = None  # seconds after start()
    completed_when_fired: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> CompletionTrigger:
        started = time.monotonic()

        def watch() -> None:
            while not self._stop.is_set():
                completed = self.fleet.completed()
                if completed >= self.threshold:
                    self.apply()
                    self.completed_when_fired = completed
                    self.fired_after_s = time.monotonic() - started
                    return
                self._stop.wait(self.poll_s)

        self._thread = threading.Thread(target=watch, name="completion-trigger", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _healthy_header_s(ctx: Context, n_docs: int, time_scale: float, cap: int) -> float:
    """The header phase of the same ingest on a healthy fleet of the same shape (own work directory,
    so a fresh store, Dagster home and header cache; the same document keys)."""
    work = ctx.workdir / "healthy"
    docs = work / "docs"
    write_corpus(docs, n_docs)
    fleet = Fleet(work, list(TAIL_SPEEDS), time_scale=time_scale)
    try:
        env = fleet_env(work, fleet, cap, database_url=ctx.db_url())
        res = ingest(env, docs)
        if res.rc != 0 or res.failed:
            raise RuntimeError(f"the healthy reference run failed (rc {res.rc}): {res.tail()[-300:]}")
        return _ingest_header_wall(env, res)
    finally:
        fleet.stop()


def _tail_fault(ctx: Context, name: str, n_docs: int, time_scale: float, cap: int, faults: dict | None = None,
                slow_after: float | None = None, slowdown: float = 20.0, faulty: int = 3) -> Result:
    """A healthy reference ingest, then the same ingest with replica `faulty` faulty: `faults` from
    the start, and/or `slowdown` once a `slow_after` share of the corpus's requests (one per chunk)
    have completed. Nothing lost, whole documents, header phase within TAIL_BOUND of the healthy one."""
    r = Result(name)
    healthy = _healthy_header_s(ctx, n_docs, time_scale, cap)
    work = ctx.workdir / "faulty"
    docs = work / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    fleet = Fleet(work, list(TAIL_SPEEDS), time_scale=time_scale, faults=faults)
    trigger = None
    try:
        env = fleet_env(work, fleet, cap, database_url=ctx.db_url())
        env.prepare()  # before the trigger's clock starts
        if slow_after is not None:
            trigger = CompletionTrigger(fleet, math.ceil(slow_after * total),
                                        lambda: fleet.set_faults(faulty, slowdown=slowdown)).start()
        res = ingest(env, docs)
        if trigger is not None:
            trigger.stop()
        stats = fleet.stats()
        r.check(f"run completes (rc {res.rc})", res.rc == 0 and not res.failed)
        if trigger is not None:
            r.check(f"the slowdown began during the run (after {trigger.completed_when_fired} of {total} answers)",
                    trigger.fired_after_s is not None and trigger.fired_after_s < res.wall_s)
        wall = _ingest_header_wall(env, res)
        ratio = wall / healthy if healthy > 0 else float("inf")
        # Replicas faulty from the start leave less capacity: a fleet-bound run cannot beat the ratio of
        # capacities, so the bound applies to the healthy run scaled to the capacity that is left.
        capacity = (sum(TAIL_SPEEDS) / sum(v for i, v in enumerate(TAIL_SPEEDS) if i not in faults)) if faults else 1.0
        r.check(f"header phase {wall:.1f}s within {TAIL_BOUND}x of the healthy fleet's {healthy:.1f}s"
                + (f" x {capacity:.3f} (the capacity left)" if faults else ""),
                ratio / capacity <= TAIL_BOUND)
        counts = _header_counts(env, _run_ids(res))
        answers = [s["completed"] for s in stats]
        r.llm_calls_respent = max(0, sum(answers) - total)
        r.figures = {
            "header_s": round(wall, 2), "healthy_header_s": round(healthy, 2), "header_ratio": round(ratio, 3),
            "bound": TAIL_BOUND, "requests": total, **counts,
            "sim_aborted": sum(s["aborted"] for s in stats), "answers_per_replica": answers,
            "peak_open_per_replica": [s["peak_open_requests"] for s in stats],
            "stalls_injected": sum(s["stalls_injected"] for s in stats), "ingest_wall_s": round(res.wall_s, 2),
        }
        if faults:
            r.figures["capacity_floor_ratio"] = round(capacity, 3)
            r.figures["header_ratio_over_capacity_left"] = round(ratio / capacity, 3)
        if trigger is not None:
            r.figures.update(slowed_after_answers=trigger.completed_when_fired,
                             slowed_after_s=None if trigger.fired_after_s is None else round(trigger.fired_after_s, 2))
        r.settle(store_state(env), expected, set(expected),
                 f"header phase {wall:.1f}s vs healthy {healthy:.1f}s ({ratio:.2f}x); hedges {counts['hedges']} "
                 f"(won {counts['hedge_wins']}); sim aborted {r.figures['sim_aborted']}; answers per replica "
                 f"{answers}; peak open {r.figures['peak_open_per_replica']}"
                 + ("" if res.rc == 0 else f"; {res.tail()[-300:]}"))
    finally:
        if trigger is not None:
            trigger.stop()
        fleet.stop()
    return r


def scenario_stalled_replica(ctx: Context, n_docs: int = 40, time_scale: float = 2.5, cap: int = TAIL_CAP) -> Result:
    """One replica of four accepts connections and never answers a completion (stalled from the
    start): nothing lost, and the header phase within 1.25x of the healthy fleet's scaled to the
    capacity left (three replicas do the work of four, so a fleet-bound run cannot beat 4/3 of it;
    figures: header_ratio, capacity_floor_ratio). A request stuck there must not hold the run for the
    60 s request timeout: hedged requests."""
    stalled = {"stall_s": 3600.0, "stall_rate": 1.0}  # never answers within any run
    return _tail_fault(ctx, "stalled_replica", n_docs, time_scale, cap, faults={3: stalled})


def scenario_slow_tail(ctx: Context, n_docs: int = 40, time_scale: float = 2.5, cap: int = TAIL_CAP) -> Result:
    """One replica of four becomes 20x slower once 90 % of the run's requests have completed: nothing
    lost, and the header phase within 1.25x of the healthy fleet's (the tail is hedged, not waited out)."""
    return _tail_fault(ctx, "slow_tail", n_docs, time_scale, cap, slow_after=0.9, slowdown=20.0)


def scenario_malformed(ctx: Context, n_docs: int = 3, modes: tuple[str, ...] = ("empty", "overlong", "echo", "bad_json"),
                       ) -> Result:
    """Malformed answers (part of them): validated and retried, no bad header stored; every answer
    malformed: the documents fail with the reason, nothing stored."""
    r = Result("malformed")
    notes = []
    states: list[tuple[StoreState, dict[str, int], set[str]]] = []
    for mode in modes + ("always_empty",):
        work = ctx.workdir / mode
        work.mkdir()
        docs = work / "docs"
        write_corpus(docs, n_docs, tag=mode[:2])
        expected = expected_chunks(docs)
        always = mode == "always_empty"
        kind = "empty" if always else mode
        rate = 1.0 if always else 0.2
        fleet = Fleet(work, [1, 1], time_scale=0.3,
                      faults={i: {"malformed": kind, "malformed_rate": rate} for i in range(2)})
        try:
            env = fleet_env(work, fleet, 4, database_url=ctx.db_url())
            if mode == "bad_json":
                env.extra["CTX_LLM_BATCH_SIZE"] = "4"
            res = ingest(env, docs)
            state = store_state(env)
            if always:
                reasons = list(res.failed.values())
                r.check(f"always_empty: every document fails (rc {res.rc})",
                        res.rc == 1 and len(res.failed) == len(expected))
                r.check("always_empty: the reason names the bad answer",
                        bool(reasons) and all(re.search(r"empty|invalid|header", e, re.IGNORECASE) for e in reasons))
                r.check("always_empty: nothing stored", state.committed == 0)
                notes.append(f"always_empty: {len(res.failed)} failed: {reasons[0][:120] if reasons else ''!r}")
                states.append((state, expected, set()))
            else:
                # Retries on valid answers should carry every document; a document that still fails
                # must say why (the configured policy), never store a bad header.
                unexplained = [k for k, e in res.failed.items() if not e.strip()]
                r.check(f"{mode}: failures carry a reason", not unexplained)
                r.check(f"{mode}: completes (rc {res.rc})", res.rc == 0)
                notes.append(f"{mode}: {len(res.succeeded)} ok, {len(res.failed)} failed"
                             + "".join(f" ({e[-160:]!r})" for e in list(res.failed.values())[:1]))
                states.append((state, expected, set(expected)))
        finally:
            fleet.stop()
    # One view over the runs' stores, keys prefixed by the run.
    merged = StoreState({}, {}, {}, 0, 0, 0, [], 0)
    exp_all: dict[str, int] = {}
    commit_all: set[str] = set()
    for n, (state, expected, should) in enumerate(states):
        merged.documents.update({f"{n}:{k}": v for k, v in state.documents.items()})
        merged.rows.update({f"{n}:{k}": v for k, v in state.rows.items()})
        merged.ordinals_ok.update({f"{n}:{k}": v for k, v in state.ordinals_ok.items()})
        exp_all.update({f"{n}:{k}": v for k, v in expected.items()})
        commit_all |= {f"{n}:{k}" for k in should}
        merged.duplicates += state.duplicates
        merged.committed += state.committed
        merged.headers += state.headers
    r.settle(merged, exp_all, commit_all, "; ".join(notes))
    return r


def scenario_worker_sigkill(ctx: Context, n_docs: int = 8) -> Result:
    """The `ctx ingest` process SIGKILLed mid-run: only whole documents stored; a re-run completes
    without asking the fleet for any header already in the cache."""
    r = Result("worker_sigkill")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    total = sum(expected.values())
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=4.0)
    try:
        env = fleet_env(ctx.workdir, fleet, 1, database_url=ctx.db_url())
        proc = env.start(docs)
        env.prepare()
        wait_until(lambda: len(env.committed_partitions()) >= 2, proc, 300, "two committed documents")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.communicate()
        at_kill = fleet.completed()
        state = store_state(env)
        partial = whole_documents_problems(state, expected)
        r.check("after the kill only whole documents are stored", not partial)
        r.check("the kill landed mid-run", 1 <= len(state.documents) < len(expected))
        cached = state.cache_rows
        rerun = ingest(env, docs)
        rerun_requests = fleet.completed() - at_kill
        r.check(f"re-run completes (rc {rerun.rc})", rerun.rc == 0 and not rerun.failed)
        r.llm_calls_respent = max(0, rerun_requests - (total - cached))
        r.check("no LLM call re-spent on a cached header", r.llm_calls_respent == 0)
        r.settle(store_state(env), expected, set(expected),
                 f"killed with {len(state.documents)} docs / {state.committed} chunks stored, {cached} headers cached; "
                 f"re-run asked {rerun_requests} for {total - cached} uncached"
                 + ("" if rerun.rc == 0 else f"; {rerun.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


def _concurrent_runs(ctx: Context, name: str, database_url: str, runs: int = 4, per_run: int = 2) -> Result:
    r = Result(name)
    folders = []
    expected: dict[str, int] = {}
    for i in range(runs):
        folder = ctx.workdir / f"set{i}"
        write_corpus(folder, per_run, tag=f"s{i}-")
        folders.append(folder)
        expected.update(expected_chunks(folder))
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.3)
    try:
        env = fleet_env(ctx.workdir, fleet, 8, database_url=database_url)
        env.prepare()
        started = time.monotonic()
        procs = [env.start(folder) for folder in folders]
        results = [finish(p, started, timeout=600) for p in procs]
        rcs = [x.rc for x in results]
        r.check(f"every run completes (rc {rcs})", all(x.rc == 0 and not x.failed for x in results))
        lock_lines = [line for x in results for line in (x.stdout + x.stderr).splitlines()
                      if re.search(r"lock|conflict|could not serialize|deadlock", line, re.IGNORECASE)]
        r.check("no lock failure surfaces to the user", not lock_lines)
        total = sum(expected.values())
        r.llm_calls_respent = max(0, fleet.completed() - total)
        r.settle(store_state(env), expected, set(expected),
                 f"{runs} runs x {per_run} docs in {time.monotonic() - started:.1f}s"
                 + (f"; {lock_lines[0][:160]!r}" if lock_lines else "")
                 + "".join(f"; run {i}: {x.tail()[-200:]}" for i, x in enumerate(results) if x.rc != 0))
    finally:
        fleet.stop()
    return r


def scenario_concurrent_runs_duckdb(ctx: Context) -> Result:
    """Four `ctx ingest` at once on disjoint documents, one DuckDB store."""
    return _concurrent_runs(ctx, "concurrent_runs_duckdb", "")


def scenario_concurrent_runs_postgres(ctx: Context) -> Result:
    """Four `ctx ingest` at once on disjoint documents, one Postgres store."""
    return _concurrent_runs(ctx, "concurrent_runs_postgres", ctx.pg_url())


def scenario_same_document_twice(ctx: Context) -> Result:
    """The same file submitted twice at once (two `ctx ingest`): one result, no duplicates."""
    r = Result("same_document_twice")
    docs = ctx.workdir / "docs"
    write_corpus(docs, 1)
    path = next(docs.iterdir())
    key = f"docs/{path.name}"  # relative to CTX_SOURCE_ROOT, the work directory
    expected = {key: expected_chunks(docs)[key]}
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.3)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        env.prepare()
        started = time.monotonic()
        procs = [env.start(path), env.start(path)]
        results = [finish(p, started) for p in procs]
        r.check(f"both submissions succeed (rc {[x.rc for x in results]})", all(x.rc == 0 for x in results))
        state = store_state(env)
        r.check("one document", list(state.documents) == [key])
        r.check("one index version", state.versions == 1)
        r.llm_calls_respent = max(0, fleet.completed() - expected[key])
        r.settle(state, expected, set(expected),
                 f"{len(state.documents)} document(s), {state.committed} rows"
                 + "".join(f"; run {i}: {x.tail()[-200:]}" for i, x in enumerate(results) if x.rc != 0))
    finally:
        fleet.stop()
    return r


def scenario_postgres_restart(ctx: Context, n_docs: int = 8) -> Result:
    """Postgres restarted (pg_ctl restart -m fast) mid-run: the run fails or recovers cleanly, no
    partial document; a re-run completes."""
    r = Result("postgres_restart")
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=4.0)
    try:
        env = fleet_env(ctx.workdir, fleet, 1, database_url=ctx.pg_url())
        started = time.monotonic()
        proc = env.start(docs)
        env.prepare()
        wait_until(lambda: len(env.committed_partitions()) >= 2, proc, 300, "two committed documents")
        ctx.restart_postgres()
        res = finish(proc, started)
        state = store_state(env)
        partial = whole_documents_problems(state, expected)
        r.check("after the restart only whole documents are stored", not partial)
        r.check(f"the run ends (rc {res.rc}) with each document ok or failed with a reason",
                res.rc in (0, 1) and len(res.outcomes) == len(expected)
                and all(e.strip() for e in res.failed.values()))
        outcome = f"run rc {res.rc}: {len(res.succeeded)} ok, {len(res.failed)} failed"
        if res.failed:
            outcome += f" ({next(iter(res.failed.values()))[:120]!r})"
        rerun = ingest(env, docs)
        r.check(f"re-run completes (rc {rerun.rc})", rerun.rc == 0 and not rerun.failed)
        r.settle(store_state(env), expected, set(expected),
                 outcome + ("" if rerun.rc == 0 else f"; re-run: {rerun.tail()[-300:]}"))
    finally:
        fleet.stop()
    return r


SCENARIOS: dict[str, Callable[..., Result]] = {
    "replica_killed": scenario_replica_killed,
    "all_replicas_down": scenario_all_replicas_down,
    "errors_5xx": scenario_errors_5xx,
    "slow_replica": scenario_slow_replica,
    "stalled_replica": scenario_stalled_replica,
    "slow_tail": scenario_slow_tail,
    "malformed": scenario_malformed,
    "worker_sigkill": scenario_worker_sigkill,
    "concurrent_runs_duckdb": scenario_concurrent_runs_duckdb,
    "concurrent_runs_postgres": scenario_concurrent_runs_postgres,
    "same_document_twice": scenario_same_document_twice,
    "postgres_restart": scenario_postgres_restart,
}


# ---------------------------------------------------------------- context (Postgres, work dirs)

class Context:
    """One scenario's working directory, and the bench's Postgres server (started on first use)."""

    pg_server = None
    pg_dir: Path | None = None

    def __init__(self, workdir: Path, backend: str = "duckdb"):
        self.workdir = workdir
        self.backend = backend

    def db_url(self) -> str:
        return self.pg_url() if self.backend == "postgres" else ""

    @classmethod
    def server(cls):
        if cls.pg_server is None:
            import pgserver

            # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
            cls.pg_dir = Path(tempfile.mkdtemp(prefix="ctx-faults-pg-"))
            cls.pg_server = pgserver.get_server(cls.pg_dir, cleanup_mode="stop")
            cls.pg_server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        return cls.pg_server

    def pg_url(self) -> str:
        import uuid

        server = self.server()
        name = f"f_{uuid.uuid4().hex[:12]}"
        server.psql(f"CREATE DATABASE {name};")
        return server.get_uri().replace("/postgres?", f"/{name}?", 1)

    def restart_postgres(self) -> None:
        from pgserver._commands import pg_ctl

        server = self.server()
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    @classmethod
    def shutdown(cls) -> None:
        if cls.pg_server is not None:
            cls.pg_server.cleanup()
            cls.pg_server = None
            shutil.rmtree(cls.pg_dir, ignore_errors=True)


def all_scenarios() -> dict[str, Callable[..., Result]]:
    """These and issue 39's (crash safety, the header cache: bench/fault_crashes.py, which imports this module)."""
    from bench.fault_crashes import SCENARIOS as CRASH_SCENARIOS

    return {**SCENARIOS, **CRASH_SCENARIOS}


def run_scenario(name: str, root: Path, **kwargs) -> Result:
    workdir = root / name
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        result = all_scenarios()[name](Context(workdir), **kwargs)
    except Exception as exc:  # a scenario that cannot complete is a failed scenario, with the reason
        result = Result(name, detail=f"error: {type(exc).__name__}: {exc} "
                                     f"[{traceback.format_exc().strip().splitlines()[-3][:200]}]")
    result.detail = f"[{time.monotonic() - started:.0f}s] " + result.detail
    return result


def print_table(results: list[Result]) -> None:
    header = f"{'scenario':26} {'pass':5} {'expect':>6} {'commit':>6} {'lost':>5} {'dup':>4} {'respent':>7}  detail"
    print(header)
    print("-" * len(header))
    for x in results:
        print(f"{x.name:26} {'yes' if x.passed else 'NO':5} {x.chunks_expected:6d} {x.chunks_committed:6d} "
              f"{x.chunks_lost:5d} {x.duplicates:4d} {x.llm_calls_respent:7d}  {x.detail}")


def main(argv: list[str] | None = None) -> int:
    from bench.report import write_json

    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the results here")
    scenarios = all_scenarios()
    parser.add_argument("--only", default="", help=f"comma-separated scenarios of {', '.join(scenarios)}")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(scenarios)
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(scenarios)}")
    root = Path(tempfile.mkdtemp(prefix="ctx-faults-"))
    results = []
    try:
        for name in names:
            result = run_scenario(name, root)
            print(f"{name}: {'passed' if result.passed else 'FAILED'} {result.detail}", file=sys.stderr, flush=True)
            results.append(result)
    finally:
        Context.shutdown()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"working directories kept under {root}", file=sys.stderr)
    print_table(results)
    if args.json:
        write_json(Path(args.json), {"scenarios": [x.row() for x in results]})
    return 0 if all(x.passed for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
