"""Fault scenarios of issue 39 for bench.faults: nothing lost, nothing wrong, nothing stuck.

* killed_in_commit_duckdb / killed_in_commit_postgres: `ctx ingest` SIGKILLed right after a store
  transaction of several documents (bench/killing_ctx.py), before its run recorded them; the next `ctx`
  command fails the dead run and records the commits, and a re-run completes;
* killed_runs_then_sensor: two `ctx ingest` runs killed mid-run, then a tick of the `new_documents`
  sensor: the dead runs are failed (no ingest slot held), and the tick's run ingests the inbox;
* emptied_inbox: the inbox emptied at once (an unmounted share): the tick removes nothing and says so;
  after `ctx inbox confirm-removals` the next tick removes them;
* shared_header_cache: two documents with the same body under different titles share the header cache;
  no chunk may be stored with a header naming the other document.

Figures: `stuck_runs` (runs of a dead process still in progress), `unrecorded` (stored documents with no
materialization), `wrong_document_headers`."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from bench.corpora import expected_chunks, write_corpus
from bench.fault_harness import (
    REPO_ROOT,
    Context,
    Env,
    Fleet,
    Result,
    fleet_env,
    ingest,
    store_state,
)
from bench.killing_ctx import KILL_AFTER_COMMIT_OF


def start_killed_ingest(env: Env, paths: list[Path], batch: int) -> subprocess.Popen:
    """`ctx ingest` that kills itself after a commit of `batch` documents."""
    env.prepare()
    return subprocess.Popen([sys.executable, "-m", "bench.killing_ctx", "ingest", *map(str, paths)], cwd=REPO_ROOT,
                            env={**env.environ(), KILL_AFTER_COMMIT_OF: str(batch)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def killed_ingest(env: Env, paths: list[Path], batch: int) -> int:
    """Its return code (-9 if it killed itself)."""
    return start_killed_ingest(env, paths, batch).wait(timeout=600)


def run_states(env: Env) -> dict[str, str]:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        return {r.dagster_run.run_id: r.dagster_run.status.value for r in instance.get_run_records()}


def stuck_runs(env: Env) -> int:
    """Runs of this host whose process is gone but that are still in progress (each holds a slot)."""
    import dagster as dg

    from contextual_assets.lifecycle.run_liveness import RunProcess

    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        records = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        return sum(1 for r in records if (p := RunProcess.of(dict(r.dagster_run.tags))) is not None and p.is_gone())


def unrecorded(env: Env) -> int:
    """Stored documents (current version) whose partition has no `chunk_embeddings` materialization."""
    store = env.store()
    try:
        stored = {d.doc_id for d in store.corpus.documents()}
    finally:
        store.close()
    return len(stored - env.committed_partitions())


def _killed_in_commit(ctx: Context, name: str, n_docs: int = 6, batch: int = 3) -> Result:
    r = Result(name)
    docs = ctx.workdir / "docs"
    write_corpus(docs, n_docs)
    expected = expected_chunks(docs)
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.2)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        rc = killed_ingest(env, sorted(docs.iterdir()), batch)
        r.check(f"killed inside a commit of {batch} documents (rc {rc})", rc == -signal.SIGKILL)
        ahead = unrecorded(env)
        r.check("the store was ahead of the event log after the kill", ahead >= batch)
        rerun = ingest(env, docs)
        r.check(f"the next command completes (rc {rerun.rc})", rerun.rc == 0 and not rerun.failed)
        stuck, missing = stuck_runs(env), unrecorded(env)
        r.check("no run of a dead process left in progress", stuck == 0)
        r.check("every stored document is materialized", missing == 0)
        r.figures.update(stuck_runs=stuck, unrecorded_after_kill=ahead, unrecorded=missing)
        r.settle(store_state(env), expected, set(expected), f"{ahead} documents stored but unrecorded after the kill; "
                 f"{missing} after the next command; {stuck} stuck runs")
    finally:
        fleet.stop()
    return r


def scenario_killed_in_commit_duckdb(ctx: Context, **kwargs) -> Result:
    return _killed_in_commit(ctx, "killed_in_commit_duckdb", **kwargs)


def scenario_killed_in_commit_postgres(ctx: Context, **kwargs) -> Result:
    ctx.backend = "postgres"
    return _killed_in_commit(ctx, "killed_in_commit_postgres", **kwargs)


def scenario_killed_runs_then_sensor(ctx: Context, n_inbox: int = 3) -> Result:
    from bench.sensor_tick import SensorTick

    r = Result("killed_runs_then_sensor")
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.2)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        # Two at once, so that neither one's start (which fails dead runs) comes after the other's death.
        procs = []
        for name in ("first", "second"):
            write_corpus(ctx.workdir / name, 2, tag=name)
            procs.append(start_killed_ingest(env, sorted((ctx.workdir / name).iterdir()), 1))
        killed = [p.wait(timeout=600) for p in procs]
        r.check(f"two ingests killed (rc {killed})", killed == [-signal.SIGKILL] * 2)
        before = stuck_runs(env)
        r.check("both dead runs held their slots before the tick", before == 2)
        inbox = ctx.workdir / "inbox"
        write_corpus(inbox, n_inbox, tag="inbox")
        env.extra.update(CTX_INBOX=str(inbox), CTX_INBOX_SETTLE_S="0", CTX_SOURCE_ROOT=str(ctx.workdir))
        launched = SensorTick(env).tick_and_launch()
        stuck = stuck_runs(env)
        r.check("the tick failed both dead runs", stuck == 0)
        r.check(f"the tick's runs succeeded ({launched})", bool(launched) and all(launched))
        # What the killed runs did not finish, a re-run does.
        rerun = ingest(env, ctx.workdir / "first", ctx.workdir / "second")
        r.check(f"the killed runs' documents re-run (rc {rerun.rc})", rerun.rc == 0 and not rerun.failed)
        r.figures.update(stuck_runs_before=before, stuck_runs=stuck, sensor_runs=len(launched))
        # The sensor keys a file by its path inside the inbox.
        expected = {k.split("/", 1)[1]: n for k, n in expected_chunks(inbox).items()}
        expected.update(expected_chunks(ctx.workdir / "first"), **expected_chunks(ctx.workdir / "second"))
        state = store_state(env)
        r.settle(state, expected, set(expected), f"{before} dead runs before the tick, {stuck} after; "
                 f"{len(launched)} sensor runs")
    finally:
        fleet.stop()
    return r


def scenario_emptied_inbox(ctx: Context, n_docs: int = 6) -> Result:
    from bench.sensor_tick import SensorTick

    r = Result("emptied_inbox")
    inbox = ctx.workdir / "inbox"
    write_corpus(inbox, n_docs)
    expected = {k.split("/", 1)[1]: n for k, n in expected_chunks(inbox).items()}  # keyed inside the inbox
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.2)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        env.extra.update(CTX_INBOX=str(inbox), CTX_INBOX_SETTLE_S="0")
        sensor = SensorTick(env)
        ingested = sensor.tick_and_launch()
        r.check(f"the inbox ingested ({ingested})", bool(ingested) and all(ingested))
        for path in inbox.iterdir():
            path.unlink()
        sensor.tick_and_launch()
        after_empty = store_state(env)
        kept = len(after_empty.documents)
        r.check("the emptied inbox's tick removed nothing", kept == n_docs)
        said = sensor.skip_reason or ""
        r.check(f"the tick says why ({said})", "confirm-removals" in said)
        confirm = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "inbox", "confirm-removals",
                                  "--expect", str(n_docs)], cwd=REPO_ROOT, env=env.environ(), capture_output=True,
                                 text=True, timeout=300)
        r.check(f"confirmed (rc {confirm.returncode})", confirm.returncode == 0)
        sensor.tick_and_launch()
        removed = n_docs - len(store_state(env).documents)
        r.check("the tick after the confirmation removed them", removed == n_docs)
        r.figures.update(documents=n_docs, kept_after_emptied_tick=kept, removed_after_confirmation=removed)
        r.settle(after_empty, expected, set(expected), f"emptied: {kept} of {n_docs} kept, said {said[:90]!r}; "
                 f"confirmed: {removed} removed")
    finally:
        fleet.stop()
    return r


TITLES = ("Master Services Agreement with Acme Logistics", "Master Services Agreement with Globex Shipping")


def scenario_shared_header_cache(ctx: Context) -> Result:
    """Two documents with one body under two titles: each chunk's header names its own document."""
    r = Result("shared_header_cache")
    docs = ctx.workdir / "contracts"
    write_corpus(ctx.workdir / "body", 1, tag="terms")
    body = next((ctx.workdir / "body").iterdir()).read_text().split("\n", 1)[1]
    docs.mkdir(parents=True, exist_ok=True)
    for i, title in enumerate(TITLES):
        (docs / f"contract_{i}.md").write_text(f"# {title}\n{body}")
    expected = expected_chunks(docs)
    fleet = Fleet(ctx.workdir, [1, 1], time_scale=0.2)
    try:
        env = fleet_env(ctx.workdir, fleet, 4, database_url=ctx.db_url())
        first = ingest(env, docs / "contract_0.md")
        second = ingest(env, docs / "contract_1.md")
        r.check(f"both ingested (rc {first.rc}, {second.rc})", first.rc == 0 and second.rc == 0)
        store = env.store()
        try:
            wrong = sum(1 for d in store.corpus.documents() for c in store.corpus.chunks(d.index_version, d.doc_id)
                        if _names_other_title(c.header, d.title))
        finally:
            store.close()
        r.check("no header names the other document", wrong == 0)
        r.figures.update(wrong_document_headers=wrong)
        r.settle(store_state(env), expected, set(expected), f"{wrong} headers name the other document")
    finally:
        fleet.stop()
    return r


def _names_other_title(header: str, title: str) -> bool:
    names = {t.split()[-2] for t in TITLES}  # the word that tells the two titles apart
    own = {n for n in names if n in title}
    return any(n in header for n in names - own) and not any(n in header for n in own)


SCENARIOS = {
    "killed_in_commit_duckdb": scenario_killed_in_commit_duckdb,
    "killed_in_commit_postgres": scenario_killed_in_commit_postgres,
    "killed_runs_then_sensor": scenario_killed_runs_then_sensor,
    "emptied_inbox": scenario_emptied_inbox,
    "shared_header_cache": scenario_shared_header_cache,
}
