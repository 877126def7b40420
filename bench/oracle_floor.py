"""The oracle floor: a wall time any client could reach on the simulated fleet, beside the model floor
(bench/model_floor.py: the cost model with ideal full batches, out of reach).

The fleet simulator's own engines (bench/sim/engine.py, ``make_engine``) are run in *simulated* time:
no sleeping, no HTTP, no threads. Every request of the corpus is handed at once (or at its arrival) to
an engine chosen by an oracle that knows every request in advance. A replica of ``speeds[r]`` runs
``spec.engines`` engines, each with its own scheduler, KV pool and prefix cache; the oracle places
requests on replicas (what a client chooses) and each replica spreads its own over its engines as the
simulator does (``engine_parts``). As fleet.py's ``Replica._engine`` does, a step of ``plan.cost_s``
takes ``plan.cost_s * (1 / speed)`` simulated seconds (no slowdown fault), requests submitted while
a step runs wait for the next ``schedule``, and the simulator sleeps ``time_scale`` wall seconds per
simulated second, so

    oracle_floor_s = min over policies of (simulated makespan) * time_scale

It includes what the model floor leaves out: ramp-up and drain, batches limited by the KV pool and
FCFS admission, preemptions, one prefix cache per engine, the longest request. Policies (each replica
gets its requests in the order below, each released at its arrival):

* ``documents``: a document's requests stay on one replica (its prefix cache); documents, by first
  arrival then largest work first, each onto the replica that would finish it first
  (``max(estimated finish, arrival) + work / speed``). Only when ``documents`` is given;
* ``slices`` / ``fine_slices``: the same with each document cut into consecutive runs of at most 1/4
  (1/16) of a replica's fair share of work (neighbouring chunks share their section's context);
* ``round_robin``: single requests in arrival order, speed-weighted smooth round robin;
* ``least_finish``: single requests in arrival order onto the replica that would finish them first.

Work estimates are the model floor's per-request ``work_s`` (``request_costs``). Each policy runs
``ROUNDS`` times: first with the replicas' speeds (x engines) as their rates, then with the rates the
previous run measured (estimated work per busy simulated second, so a replica that batches worse gets
less); its
best round counts (``oracle_round``). Prompt and output token counts are ``model_floor.token_counts``
(the simulator's own counting and natural output length); requests the simulator would reject with a
400 (context length, KV pool) are left out and counted (``oracle_rejected``).

``arrivals`` (optional) are *wall* seconds from the start, like the bench's timelines: request i
cannot be submitted before simulated time ``arrivals[i] / time_scale``.

``engine_work_over_model_work``: the winning run's engine work (sum over engines of busy simulated
seconds x speed, i.e. of ``Engine.clock``) over the model floor's work (sum of ``work_s``, all bodies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.model_floor import CostModel, RequestCost, request_costs, token_counts
from bench.sim.engine import Seq, block_hashes, make_engine
from bench.sim.fleet import ReplicaSpec

POLICIES = ("documents", "slices", "fine_slices", "round_robin", "least_finish")
# `slices` / `fine_slices`: a run of a document holds at most 1/4 (1/16) of a replica's fair share.
SLICES_PER_SHARE = {"slices": 4, "fine_slices": 16}
DOCUMENT_POLICIES = ("documents", *SLICES_PER_SHARE)
ROUNDS = 3  # runs per policy: the first, then two with the rates the previous run measured


@dataclass(frozen=True)
class Request:
    """One accepted request, as its engine sees it: prompt tokens, their block hashes, output target,
    arrival (simulated seconds), estimated work (model floor) and document."""

    index: int
    tokens: list[str]
    hashes: list[int]
    target: int
    arrival: float
    work: float
    document: str


@dataclass
class EngineRun:
    """One engine's simulated run: when it finished, its busy work (speed 1) and counters."""

    makespan: float = 0.0
    work: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)


# ---- the corpus as the engines see it ------------------------------------------------------------

def _rejected(body: Mapping[str, Any], tokens: list[str], target: int, spec: ReplicaSpec, probe: Any) -> bool:
    """What fleet.py's `_chat_answer` answers with a 400: no room in the context, or a request that
    can never fit in the engine's KV pool."""
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    room = spec.max_model_len - len(tokens)
    if cap is None:
        cap = room
    return room < 1 or cap < 1 or len(tokens) + cap > spec.max_model_len or not probe.fits_ever(len(tokens), target)


def prepare(bodies: Sequence[Mapping[str, Any]], spec: ReplicaSpec, costs: Sequence[RequestCost],
            documents: Sequence[str] | None, arrivals_sim: Sequence[float]) -> tuple[list[Request], int]:
    """(the accepted requests, the number rejected)."""
    model = CostModel.of(spec)
    probe = make_engine(spec)
    out, rejected = [], 0
    for i, (body, cost) in enumerate(zip(bodies, costs)):
        tokens, target = token_counts(body, model)
        if _rejected(body, tokens, target, spec, probe):
            rejected += 1
            continue
        doc = documents[i] if documents is not None else f"#{i}"
        out.append(Request(i, tokens, block_hashes(tokens, spec.block_size), target, arrivals_sim[i],
                           cost.work_s, doc))
    return out, rejected


# ---- the oracle's policies: requests -> one list per engine, in submission order -----------------

def _by_arrival(requests: Sequence[Request]) -> list[Request]:
    return sorted(requests, key=lambda r: r.arrival)  # stable: corpus order among equal arrivals


def _groups(requests: Sequence[Request]) -> list[list[Request]]:
    """Requests grouped by document, each group in corpus order, groups in first-appearance order."""
    groups: dict[str, list[Request]] = {}
    for r in requests:
        groups.setdefault(r.document, []).append(r)
    return list(groups.values())


def _slices(groups: list[list[Request]], limit: float) -> list[list[Request]]:
    """Each group cut into consecutive runs of at most `limit` work (at least one request a run)."""
    out = []
    for group in groups:
        run: list[Request] = []
        work = 0.0
        for r in group:
            if run and work + r.work > limit:
                out.append(run)
                run, work = [], 0.0
            run.append(r)
            work += r.work
        out.append(run)
    return out


def _least_finish(units: list[list[Request]], speeds: Sequence[float]) -> list[list[Request]]:
    """Units (lists of requests kept together) by earliest arrival then largest work, each onto the
    engine with the earliest estimated finish, max(finish, arrival) + work / speed."""
    units = sorted(units, key=lambda u: (min(r.arrival for r in u), -sum(r.work for r in u)))
    finish = [0.0] * len(speeds)
    out: list[list[Request]] = [[] for _ in speeds]
    for unit in units:
        arrival, work = min(r.arrival for r in unit), sum(r.work for r in unit)
        e = min(range(len(speeds)), key=lambda k: (max(finish[k], arrival) + work / speeds[k], -speeds[k], k))
        finish[e] = max(finish[e], arrival) + work / speeds[e]
        out[e].extend(unit)
    return out


def _round_robin(requests: Sequence[Request], speeds: Sequence[float]) -> list[list[Request]]:
    """Smooth weighted round robin (nginx's): each engine gets a share of requests by its speed."""
    current = [0.0] * len(speeds)
    total = sum(speeds)
    out: list[list[Request]] = [[] for _ in speeds]
    for r in _by_arrival(requests):
        for k, s in enumerate(speeds):
            current[k] += s
        e = max(range(len(speeds)), key=lambda k: (current[k], -k))
        current[e] -= total
        out[e].append(r)
    return out


def assign(policy: str, requests: Sequence[Request], speeds: Sequence[float]) -> list[list[Request]]:
    """One list of requests per replica (`speeds`: each replica's rate)."""
    if policy == "documents":
        return _least_finish(_groups(requests), speeds)
    if policy in SLICES_PER_SHARE:
        limit = sum(r.work for r in requests) / len(speeds) / SLICES_PER_SHARE[policy]
        return _least_finish(_slices(_groups(requests), limit), speeds)
    if policy == "round_robin":
        return _round_robin(requests, speeds)
    if policy == "least_finish":
        return _least_finish([[r] for r in _by_arrival(requests)], speeds)
    raise ValueError(f"unknown policy {policy!r}; one of {POLICIES}")


# ---- one engine in simulated time ----------------------------------------------------------------

def run_engine(spec: ReplicaSpec, speed: float, requests: Sequence[Request]) -> EngineRun:
    """The simulator's engine loop (fleet.py's `Replica._engine`) without sleeping: schedule a step,
    advance the clock by its cost / speed, commit it; requests are submitted, in list order, once the
    clock has reached their arrival (an idle engine jumps to the next arrival)."""
    engine = make_engine(spec)
    pending = sorted(requests, key=lambda r: r.arrival)
    schedule, commit, submit = engine.schedule, engine.commit, engine.submit
    factor = 1.0 / speed  # fleet.py: cost = plan.cost_s * (slowdown / speed), slowdown 1
    t, i, n = 0.0, 0, len(pending)
    while True:
        while i < n and pending[i].arrival <= t:
            r = pending[i]
            submit(Seq(r.tokens, r.target, hashes=r.hashes))
            i += 1
        plan = schedule()
        if plan is None:
            if i >= n:
                break
            if engine.outstanding():
                raise RuntimeError("engine idle with requests outstanding")
            t = pending[i].arrival
            continue
        t += plan.cost_s * factor
        commit(plan)
    if engine.outstanding():
        raise RuntimeError("engine stopped with requests outstanding")
    return EngineRun(makespan=t, work=engine.clock, counters=dict(engine.counters))


def run_policy(policy: str, requests: Sequence[Request], spec: ReplicaSpec, speeds: Sequence[float],
               rounds: int = ROUNDS) -> list[list[EngineRun]]:
    """`rounds` runs of a policy over replicas of `speeds` (their engines' runs, replica by replica):
    the first with each replica's speed x engines as its rate, each later one with the rates the
    previous run measured (estimated work per busy simulated second)."""
    engines = spec.engines
    rates = [s * engines for s in speeds]
    out = []
    for _ in range(rounds):
        parts = assign(policy, requests, rates)
        runs = [run_engine(spec, s, sub) for s, part in zip(speeds, parts) for sub in engine_parts(part, engines)]
        out.append(runs)
        rates = [_rate(rate, part, runs[r * engines:(r + 1) * engines], s)
                 for r, (rate, part, s) in enumerate(zip(rates, parts, speeds))]
    return out


def engine_parts(part: Sequence[Request], engines: int) -> list[list[Request]]:
    """A replica's requests on its engines as the replica itself places them (fleet.py's `_pick_engine`:
    the engine with the fewest outstanding requests; requests handed over together alternate). A client
    picks the replica, never the engine behind it, so neither does the oracle: a data-parallel replica
    splits a section's chunks over its engines' separate prefix caches whoever sends them."""
    ordered = _by_arrival(part)
    return [ordered[e::engines] for e in range(engines)]


def _rate(rate: float, part: Sequence[Request], runs: Sequence[EngineRun], speed: float) -> float:
    estimated, busy = sum(r.work for r in part), max((run.work for run in runs), default=0.0) / speed
    return estimated / busy if estimated > 0 and busy > 0 else rate


# ---- the floor -----------------------------------------------------------------------------------

def _arrivals_sim(arrivals: Sequence[float] | None, n: int, time_scale: float) -> list[float]:
    if arrivals is None:
        return [0.0] * n
    if len(arrivals) != n:
        raise ValueError(f"arrivals has {len(arrivals)} values for {n} bodies")
    if time_scale <= 0:
        raise ValueError("arrivals (wall seconds) need time_scale > 0")
    if any(not a >= 0 for a in arrivals):
        raise ValueError("arrivals must be >= 0")
    return [a / time_scale for a in arrivals]


def _policies(policies: Sequence[str] | None, documents: Sequence[str] | None) -> list[str]:
    chosen = list(policies) if policies is not None else \
        [p for p in POLICIES if documents is not None or p not in DOCUMENT_POLICIES]
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown or not chosen:
        raise ValueError(f"policies must be a non-empty subset of {POLICIES}, got {chosen}")
    if documents is None and any(p in DOCUMENT_POLICIES for p in chosen):
        raise ValueError(f"the policies {DOCUMENT_POLICIES} need documents")
    return chosen


def _figures(runs: list[EngineRun], replicas: int, engines: int, time_scale: float, model_work: float) -> dict:
    makespans = [max(run.makespan for run in runs[r * engines:(r + 1) * engines]) for r in range(replicas)]
    work = sum(run.work for run in runs)

    def total(name: str) -> int:
        return sum(run.counters.get(name, 0) for run in runs)

    return {"oracle_floor_s": max(makespans, default=0.0) * time_scale,
            "engine_work_over_model_work": work / model_work if model_work else None,
            "oracle_replica_makespans_s": [m * time_scale for m in makespans],
            "oracle_preemptions": total("preemptions"),
            "oracle_engine_work_s": work,
            "oracle_prefix_hit_tokens": total("prefix_hit_tokens"),
            "oracle_prefix_query_tokens": total("prefix_query_tokens"),
            "oracle_generation_tokens": total("generation_tokens")}


def oracle_floor(bodies: Sequence[Mapping[str, Any]], speeds: Sequence[float], time_scale: float, spec: ReplicaSpec,
                 documents: Sequence[str] | None = None, arrivals: Sequence[float] | None = None,
                 policies: Sequence[str] | None = None, rounds: int = ROUNDS) -> dict:
    """The oracle floor of chat `bodies` (the platform's exact bodies) on replicas of `speeds`, each
    of `spec` (its `speed` ignored; `engines` engines each) at `time_scale` wall seconds per simulated
    second; `documents[i]`: body i's document; `arrivals[i]`: wall seconds before body i may be sent.
    `policies`: a subset of POLICIES (default: all that apply). Returns the winning policy's figures
    (see the module docstring; `oracle_replica_makespans_s` in wall seconds, `oracle_engine_work_s`
    in simulated seconds at speed 1) and `oracle_policies`: every policy's floor."""
    if not speeds or any(not s > 0 for s in speeds):
        raise ValueError("speeds must be a non-empty list of values > 0")
    if not time_scale >= 0 or rounds < 1:
        raise ValueError("time_scale must be >= 0 and rounds >= 1")
    if documents is not None and len(documents) != len(bodies):
        raise ValueError(f"documents has {len(documents)} values for {len(bodies)} bodies")
    chosen = _policies(policies, documents)
    costs = request_costs(bodies, CostModel.of(spec))
    model_work = sum(c.work_s for c in costs)
    requests, rejected = prepare(bodies, spec, costs, documents, _arrivals_sim(arrivals, len(bodies), time_scale))
    results = {p: _best_round(run_policy(p, requests, spec, speeds, rounds), len(speeds), spec.engines,
                              time_scale, model_work) for p in chosen}
    # Ties go to the earlier policy in POLICIES order (`chosen` keeps the caller's order).
    best = min(chosen, key=lambda p: (results[p]["oracle_floor_s"], POLICIES.index(p)))
    return {**results[best], "oracle_policy": best, "oracle_requests": len(requests), "oracle_rejected": rejected,
            "oracle_policies": {p: results[p]["oracle_floor_s"] for p in chosen}}


def _best_round(rounds: list[list[EngineRun]], replicas: int, engines: int, time_scale: float,
                model_work: float) -> dict:
    figures = [{**_figures(runs, replicas, engines, time_scale, model_work), "oracle_round": i}
               for i, runs in enumerate(rounds)]
    return min(figures, key=lambda f: (f["oracle_floor_s"], f["oracle_round"]))
