"""Fault-injection bench: real ingests (`ctx ingest` subprocesses -> Dagster -> store) against the
fleet simulator with injected faults, each scenario checked for lost chunks, duplicates, partial
documents and LLM calls re-spent.

    python -m bench.faults --json bench/out/faults.json [--only NAME[,NAME]] [--keep]

Scenarios (names for --only): replica_killed, all_replicas_down, errors_5xx, slow_replica,
stalled_replica, slow_tail, malformed, worker_sigkill, concurrent_runs_duckdb,
concurrent_runs_postgres, same_document_twice, postgres_restart, killed_in_commit_duckdb,
killed_in_commit_postgres, killed_runs_then_sensor, emptied_inbox, shared_header_cache. The harness is
bench/fault_harness.py; the scenarios beside these in fault_tails.py, fault_process.py, fault_crashes.py.

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
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.corpora import expected_chunks, write_corpus
from bench.fault_crashes import SCENARIOS as CRASH_SCENARIOS
from bench.fault_harness import (
    Context,
    Fleet,
    Result,
    StoreState,
    finish,
    fleet_env,
    ingest,
    store_state,
    wait_until,
)
from bench.fault_process import (
    scenario_concurrent_runs_duckdb,
    scenario_concurrent_runs_postgres,
    scenario_postgres_restart,
    scenario_same_document_twice,
    scenario_worker_sigkill,
)
from bench.fault_tails import (
    CompletionTrigger,  # noqa: F401 - part of this module's interface (tests)
    scenario_slow_replica,
    scenario_slow_tail,
    scenario_stalled_replica,
)


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
    **CRASH_SCENARIOS,
}


def run_scenario(name: str, root: Path, **kwargs) -> Result:
    workdir = root / name
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        result = SCENARIOS[name](Context(workdir), **kwargs)
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
    parser.add_argument("--only", default="", help=f"comma-separated scenarios of {', '.join(SCENARIOS)}")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
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
