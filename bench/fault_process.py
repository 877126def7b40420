"""Fault scenarios of the ingest process and the store: the worker SIGKILLed mid-run, concurrent runs on
DuckDB and Postgres, the same document twice at once, Postgres restarted mid-run."""

from __future__ import annotations

import re
import signal
import time

from bench.corpora import expected_chunks, write_corpus
from bench.fault_harness import (
    Context,
    Fleet,
    Result,
    finish,
    fleet_env,
    ingest,
    store_state,
    wait_until,
    whole_documents_problems,
)


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
