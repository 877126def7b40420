"""One simulated replica (bench/sim/fleet.py): lifecycle (start, kill, restart), its engine loops, faults
and accounting. The HTTP side is in http_app.py, scoring.py and metrics.py (mixins; metrics.py also
keeps the lagged gauges' snapshots).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import socket
import time
from typing import TYPE_CHECKING, Any

from bench.sim.engine import (
    Seq,
    make_engine,
)
from bench.sim.http_app import ReplicaHttp
from bench.sim.metrics import ReplicaMetrics
from bench.sim.scoring import ReplicaScoring

if TYPE_CHECKING:
    from bench.sim.fleet import FleetSimulator
from bench.sim.specs import (
    _COUNTER_FIELDS,
    _FLOAT_ACCT,
    FaultConfig,
    ReplicaDown,
    ReplicaSpec,
)

# --------------------------------------------------------------------------------------------
# One replica (all methods run on the fleet's event loop)


class Replica(ReplicaHttp, ReplicaScoring, ReplicaMetrics):
    def __init__(self, index: int, spec: ReplicaSpec, fleet: FleetSimulator, sock_port: int):
        self.index = index
        self.spec = spec
        self.fleet = fleet
        self.port = sock_port
        self.faults = dataclasses.replace(spec.faults)
        self.root = spec.root
        self.parent = spec.parent
        self.rng = random.Random(self._fault_seed())
        self.engines = [make_engine(spec) for _ in range(spec.engines)]
        self.engine_tasks: list[asyncio.Task] = []
        self.wakes = [asyncio.Event() for _ in self.engines]
        # Per engine: (loop time, running, waiting, kv usage), for metrics_lag_s.
        self.history: list[collections.deque] = [collections.deque() for _ in self.engines]
        self.epoch = 0
        self.alive = False
        self.server = None
        self.serve_task: asyncio.Task | None = None
        self.schedule_task: asyncio.Task | None = None
        self.metrics_offset = [dict.fromkeys(_COUNTER_FIELDS, 0) for _ in self.engines]
        self.metrics_created = time.time()
        self.acct: dict[str, float] = dict.fromkeys(
            ("busy_s", "seq_s", "prefill_s", "decode_s", "busy_wall_s", "steps", "max_lag_s", "reanchors", "errors_injected", "stalls_injected",
             "malformed_injected", "rejected", "dropped", "aborted", "kills", "restarts", "embeddings",
             "embedding_requests", "embedding_s", "rerank_requests", "score_requests", "scoring_s"), 0)
        self.scoring_free_at = 0.0  # loop time at which the scoring lane has served what it was given
        self.embedding_free_at = 0.0  # the same for the embedding lane
        self.open_requests = 0  # chat requests inside the handler (body parsed, no answer yet)
        self.peak_open_requests = 0  # since start; kills and restarts keep it
        self.app = self._build_app()

    def _fault_seed(self) -> int:
        return self.faults.seed if self.faults.seed is not None else self.fleet.seed * 1000 + self.index

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- lifecycle

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        return sock

    async def start(self, sock: socket.socket | None = None) -> None:
        import uvicorn

        sock = sock or self._bind()
        config = uvicorn.Config(self.app, log_config=None, log_level="warning", access_log=False,
                                lifespan="off", backlog=4096, timeout_keep_alive=5)  # vLLM's default
        self.server = uvicorn.Server(config)
        self.serve_task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self.serve_task.done():
                self.serve_task.result()
                raise RuntimeError(f"replica {self.index} failed to start")
            await asyncio.sleep(0.002)
        self.alive = True
        if not self.engine_tasks:
            self.engine_tasks = [asyncio.ensure_future(self._engine(e)) for e in range(len(self.engines))]

    async def kill(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self.epoch += 1
        self.acct["kills"] += 1
        server = self.server
        for s in getattr(server, "servers", []):
            s.close()  # stop listening: new connections are refused
        for conn in list(server.server_state.connections):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()  # drop in-flight and idle connections
        for e, engine in enumerate(self.engines):
            for seq in list(engine.waiting) + engine.running:
                if not seq.future.done():
                    seq.future.set_exception(ReplicaDown())
                    self.acct["dropped"] += 1
            engine.reset()  # cold KV pool and prefix cache
            self._snapshot(e)
        self.scoring_free_at = 0.0  # the queued scoring work died with the process
        self.embedding_free_at = 0.0
        server.should_exit = True
        server.force_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.serve_task), timeout=5)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a dying server may raise anything
            pass

    async def restart(self) -> None:
        if self.alive:
            return
        self.acct["restarts"] += 1
        self.metrics_offset = [dict(engine.counters) for engine in self.engines]
        self.metrics_created = time.time()
        await self.start()

    async def stop(self) -> None:
        if self.schedule_task is not None:
            self.schedule_task.cancel()
        await self.kill()
        for task in self.engine_tasks:
            task.cancel()

    # ---- faults

    def set_faults(self, **changes: Any) -> dict:
        unknown = set(changes) - {f.name for f in dataclasses.fields(FaultConfig)}
        if unknown:
            raise ValueError(f"unknown fault settings {sorted(unknown)}")
        new = dataclasses.replace(self.faults, **changes)
        new.validate()
        reseed = "seed" in changes
        self.faults = new
        if reseed:
            self.rng = random.Random(self._fault_seed())
        if "kill_at_s" in changes or "restart_at_s" in changes:
            self._reschedule()
        return dataclasses.asdict(self.faults)

    # ---- served weights

    def model_entry(self) -> dict:
        """The chat model's /v1/models entry."""
        spec = self.spec
        return {"id": spec.model_name, "object": "model", "created": int(self.fleet.started_wall), "owned_by": "sim",
                "root": self.root or spec.model_name, "parent": self.parent, "max_model_len": spec.max_model_len}

    def set_model(self, **changes: Any) -> dict:
        """Change the weights behind the served name (keys `root`, `parent`; None resets); the new entry."""
        unknown = set(changes) - {"root", "parent"}
        if unknown:
            raise ValueError(f"unknown model settings {sorted(unknown)} (root, parent)")
        for key, value in changes.items():
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{key} must be a non-empty string or null, got {value!r}")
        self.root = changes.get("root", self.root)
        self.parent = changes.get("parent", self.parent)
        return self.model_entry()

    def _reschedule(self) -> None:
        if self.schedule_task is not None:
            self.schedule_task.cancel()
            self.schedule_task = None
        kill_at, restart_at = self.faults.kill_at_s, self.faults.restart_at_s
        if kill_at is None and restart_at is None:
            return
        self.schedule_task = asyncio.ensure_future(self._scheduled(kill_at, restart_at))

    async def _scheduled(self, kill_at: float | None, restart_at: float | None) -> None:
        now = self.fleet.elapsed()
        if kill_at is not None and not (restart_at is not None and kill_at <= now and kill_at < restart_at <= now):
            await asyncio.sleep(max(0.0, kill_at - self.fleet.elapsed()))
            await self.kill()
        if restart_at is not None and (kill_at is None or restart_at >= kill_at):
            await asyncio.sleep(max(0.0, restart_at - self.fleet.elapsed()))
            if not self.alive:
                await self.restart()

    # ---- engine

    async def _engine(self, e: int) -> None:
        """Engine e's loop: schedule a step, sleep its cost (times time_scale) against a deadline, apply it."""
        spec = self.spec
        engine = self.engines[e]
        wake = self.wakes[e]
        acct = self.acct
        loop = asyncio.get_running_loop()
        anchor: float | None = None
        sim_since_anchor = 0.0
        busy_started = 0.0
        while True:
            plan = engine.schedule()
            if plan is None:
                if anchor is not None:
                    acct["busy_wall_s"] += loop.time() - busy_started
                    anchor = None
                self._snapshot(e)
                wake.clear()
                await wake.wait()
                continue
            if anchor is None:
                anchor = busy_started = loop.time()
                sim_since_anchor = 0.0
            epoch = self.epoch
            # Read every step, so a slowdown set mid-run applies from the next step.
            factor = self.faults.slowdown / spec.speed
            cost = plan.cost_s * factor
            acct["busy_s"] += cost
            acct["seq_s"] += cost * len(plan.work)  # sequence-seconds: busy_s x the step's batch
            acct["prefill_s"] += plan.prefill_s * factor
            acct["decode_s"] += plan.decode_s * factor
            acct["steps"] += 1
            self._snapshot(e)
            sim_since_anchor += cost
            deadline = anchor + sim_since_anchor * self.fleet.time_scale
            delay = deadline - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            lag = loop.time() - deadline
            if lag > acct["max_lag_s"]:
                acct["max_lag_s"] = lag
            if lag > 0.2:  # far behind (CPU starved): do not burst to catch up
                acct["reanchors"] += 1
                anchor, sim_since_anchor = loop.time(), 0.0
            if epoch != self.epoch:  # killed while "computing": the engine was reset
                continue
            engine.commit(plan)

    def _pick_engine(self) -> int:
        """The engine with the fewest outstanding requests (the lowest index on ties)."""
        if len(self.engines) == 1:
            return 0
        return min(range(len(self.engines)), key=lambda e: self.engines[e].outstanding())

    async def generate(self, tokens: list[str], target: int, engine: int | None = None) -> tuple[int, int]:
        """(generated tokens, engine index) of one chat request run to its end."""
        if not self.alive:
            raise ReplicaDown()
        e = self._pick_engine() if engine is None else engine
        seq = Seq(tokens, target, asyncio.get_running_loop().create_future())
        self.engines[e].submit(seq)
        self.wakes[e].set()
        self._snapshot(e)
        try:
            return await seq.future, e
        except asyncio.CancelledError:  # the client went away; the engine drops the cancelled seq
            seq.future.cancel()
            raise

    # ---- accounting

    @property
    def counters(self) -> dict[str, int]:
        """Cumulative counters over all engines (kills and restarts keep them)."""
        out = dict.fromkeys(_COUNTER_FIELDS, 0)
        for engine in self.engines:
            for k in _COUNTER_FIELDS:
                out[k] += engine.counters[k]
        return out

    def stats(self) -> dict:
        c = self.counters
        out = {
            "index": self.index, "base_url": self.base_url, "port": self.port, "model": self.spec.model_name,
            "speed": self.spec.speed, "alive": self.alive,
            "completed": c["success_stop"] + c["success_length"],
            "completed_stop": c["success_stop"], "completed_length": c["success_length"],
            "prompt_tokens": c["prompt_tokens"], "generation_tokens": c["generation_tokens"],
            "prefix_hit_tokens": c["prefix_hit_tokens"], "prefix_query_tokens": c["prefix_query_tokens"],
            "running": sum(len(e.running) for e in self.engines),
            "waiting": sum(len(e.waiting) for e in self.engines),
            "kv_cache_usage": self.kv_cache_usage(), "preemptions": c["preemptions"],
            "engines": len(self.engines), "cost_model": self.spec.cost_model,
            "sim_clock_s": [e.clock for e in self.engines],
            "open_requests": self.open_requests, "peak_open_requests": self.peak_open_requests,
        }
        for k, v in self.acct.items():
            out[k] = float(v) if k in _FLOAT_ACCT else int(v)
        return out

    def kv_cache_usage(self) -> float:
        """The fullest engine's KV-cache usage, now (vllm: blocks referenced by running sequences over
        all blocks; legacy: running prompt + generated tokens over the capacity, at most 1)."""
        return max(e.kv_usage() for e in self.engines)

