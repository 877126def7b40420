"""Fault scenarios on a slow tail of the fleet: one replica 10x slower, a replica that stalls, one 20x slower
for the last requests; each against the healthy fleet's header phase measured in the scenario."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.corpora import CHUNK_TOKENS, expected_chunks, write_corpus
from bench.fault_harness import (
    Context,
    Env,
    Fleet,
    Ingest,
    Result,
    fleet_env,
    ingest,
    store_state,
)
from bench.sim import SimFleet


def _floor(workdir: Path, docs: Path, time_scale: float, cap: int) -> float:
    """Wall seconds of the same header requests sent straight to three healthy replicas."""
    from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.pool import HeaderFleet
    from contextual_assets.headers.budget import fit_prompt
    from contextual_assets.headers.context import header_requests
    from contextual_assets.headers.openai_source import OpenAIHeaderSource
    from contextual_assets.headers.prompt import DEFAULT_PROMPT, load_prompt
    from contextual_assets.ingest.pipeline.parse import parse_document
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
        r.figures = _tail_figures(wall, healthy, total, counts, stats, res, capacity if faults else None, trigger)
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


def _tail_figures(wall: float, healthy: float, total: int, counts: dict[str, int], stats: list[dict], res: Ingest,
                  capacity: float | None, trigger: CompletionTrigger | None) -> dict:
    """The faulty run's figures: its header phase against the healthy one's, the fleet's answers and
    aborts; `capacity`: the share of capacity left (replicas faulty from the start), else None."""
    ratio = wall / healthy if healthy > 0 else float("inf")
    answers = [s["completed"] for s in stats]
    figures = {
        "header_s": round(wall, 2), "healthy_header_s": round(healthy, 2), "header_ratio": round(ratio, 3),
        "bound": TAIL_BOUND, "requests": total, **counts,
        "sim_aborted": sum(s["aborted"] for s in stats), "answers_per_replica": answers,
        "peak_open_per_replica": [s["peak_open_requests"] for s in stats],
        "stalls_injected": sum(s["stalls_injected"] for s in stats), "ingest_wall_s": round(res.wall_s, 2),
    }
    if capacity is not None:
        figures["capacity_floor_ratio"] = round(capacity, 3)
        figures["header_ratio_over_capacity_left"] = round(ratio / capacity, 3)
    if trigger is not None:
        figures.update(slowed_after_answers=trigger.completed_when_fired,
                       slowed_after_s=None if trigger.fired_after_s is None else round(trigger.fired_after_s, 2))
    return figures


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
