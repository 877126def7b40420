"""A vLLM-like fleet simulator: N OpenAI-compatible replicas on loopback, for benchmarks and tests.

THIS IS A BENCHMARK AND TEST TOOL, NOT PART OF THE PRODUCT PATH. Nothing in ``contextual_assets``
imports it; it stands in for a fleet of vLLM servers so that the header client (routing, retries,
failover, batching, validation) can be exercised and timed without GPUs. Its answers are canned
sentences, not language-model output.

Each replica is a Starlette app served by its own ``uvicorn.Server`` on ``127.0.0.1:PORT``; all the
replicas of a fleet share one asyncio event loop (uvloop when installed) in one background thread.
Endpoints per replica::

    GET  /v1/models             chat model (+ "sim-embed" when serve_embeddings) with root, parent and
                                max_model_len, as vLLM reports them (root: the weights, default the
                                served name; parent: a LoRA adapter's base model, else null)
    POST /v1/chat/completions   non-streaming chat completions, usage, finish_reason, max_tokens
    POST /v1/embeddings         deterministic unit vectors (embedding_dim, default 32) when serve_embeddings,
                                timed by an embedding lane (a small GPU encoder)
    POST /v1/rerank, /rerank    query + documents -> results by relevance_score (vLLM / Jina / Cohere shape),
                                top_n; scored by ``relevance`` (a word-overlap proxy for a cross-encoder)
    POST /v1/score, /score      text_1 x text_2 (1:N or N:N) -> one score per pair, same proxy
    GET  /metrics               Prometheus text with vLLM metric names (model_name and engine labels):
                                requests running / waiting, KV-cache usage, token, prefix-cache,
                                preemption and success counters (gauges lagged by metrics_lag_s)
    GET  /health                200 while the replica is up
    GET|POST /admin/faults      read / partially update this replica's fault injection (JSON)
    GET|POST /admin/model       read / change the weights behind the served name: POST
                                {"root": "...", "parent": ...} (either key; root null = the served name)
                                answers the new /v1/models entry. Simulates a compatibility alias moved
                                to other weights (the name, the answers and the costs stay the same)
    GET  /admin/stats           this replica's accounting (same dict as FleetSimulator.stats()[i])

Tokens are whitespace-separated words. The prompt of a chat request is the concatenation of
``role + " " + content`` over all messages, so ``[{"role": "user", "content": "a b c"}]`` has
4 prompt tokens.


The cost model, calibration and faults are described in bench/sim/specs.py; the answers in
bench/sim/text.py; scoring and embeddings in bench/sim/scoring.py; /metrics in bench/sim/metrics.py.
Where the rest lives: the engine (costs, KV) in engine.py and kv_blocks.py, what each step runs in
scheduler.py; one replica (lifecycle, engine loops) in replica.py, the fleet here, the simulator as its
own process in process.py, a local Dagster deployment in deployment.py.


Capacity (2-core dev box, standalone simulator, 1 replica, vllm cost model, time_scale 0.2, an httpx
client keeping 256 requests of 1,000 prompt tokens + <= 50 output in flight, 1,024 requests): 1.0 ms
of simulator CPU per request (HTTP included; the engine's own step work is O(running) per step,
~0.3 ms a request); engine wall time matched ``busy_s * time_scale`` (9.05 s for 45.25 simulated s),
worst step lag 4 ms, no re-anchoring. (Legacy model, 4 replicas, earlier measurement: ~1.5 ms.) The
httpx client driving it used ~16 ms of CPU per request, so run the simulator standalone when the
client's own CPU matters.

Standalone (keeps the simulator off a client's GIL)::

    python -m bench.sim --replicas 4 --speeds 1,1,0.775,0.775 --time-scale 0.2 --port-file OUT.json

(also ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--kv-cache-tokens``, ``--engines``,
``--metrics-lag-s``, ``--cost-model vllm|legacy``, ``--embeddings``, ``--embedding-dim``)

writes ``{"base_urls": [...], "admin_urls": [...], "pid": ...}`` atomically, then serves until
SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import threading
import time
from typing import Any

from bench.sim.engine import (  # noqa: F401 - _unit is re-exported (bench.model_floor)
    CALIBRATION,
    COST_MODELS,
    Seq,
    _unit,
    make_engine,
    natural_length,
)
from bench.sim.replica import Replica
from bench.sim.specs import MALFORMED_MODES, FaultConfig, ReplicaDown, ReplicaSpec
from bench.sim.text import (
    _CHUNK_RE,
    _ID_RE,
    _TITLE_RE,
    _digest,
    _message_text,
    content_words,
    embedding_vector,
    header_sentence,
    relevance,
)

__all__ = [
    "MALFORMED_MODES",
    "_CHUNK_RE",
    "_ID_RE",
    "_TITLE_RE",
    "FaultConfig",
    "FleetSimulator",
    "Replica",
    "ReplicaDown",
    "ReplicaSpec",
    "_digest",
    "_message_text",
    "_unit",
    "content_words",
    "embedding_vector",
    "header_sentence",
    "main",
    "relevance",
]


# --------------------------------------------------------------------------------------------
# The fleet


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()


class FleetSimulator:
    """N simulated replicas served from one background thread (its own event loop).

    ``time_scale``: real seconds per simulated second (0.2 = five times faster than the modelled GPU).
    ``seed``: fault draws of replica i use ``seed * 1000 + i`` unless its FaultConfig names a seed.
    """

    def __init__(self, specs: list[ReplicaSpec] | int, time_scale: float = 1.0, seed: int = 0):
        if isinstance(specs, int):
            specs = [ReplicaSpec() for _ in range(specs)]
        if not specs:
            raise ValueError("a fleet needs at least one replica")
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.specs = list(specs)
        self.time_scale = time_scale
        self.seed = seed
        self.replicas: list[Replica] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.started_mono = 0.0
        self.started_wall = 0.0

    # ---- lifecycle

    def start(self) -> FleetSimulator:
        if self._thread is not None:
            raise RuntimeError("fleet already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            self.loop = _new_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._start_all())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                self.loop.run_forever()
            finally:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()

        self._thread = threading.Thread(target=run, name="fleet-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join(5)
            self._thread = None
            raise RuntimeError("fleet simulator failed to start") from failure[0]
        return self

    async def _start_all(self) -> None:
        self.started_mono = time.monotonic()
        self.started_wall = time.time()
        self.replicas = []
        sockets = []
        for i, spec in enumerate(self.specs):
            replica = Replica(i, spec, self, spec.port)
            sockets.append(replica._bind())  # every port bound before any replica serves
            self.replicas.append(replica)
        for replica, sock in zip(self.replicas, sockets):
            await replica.start(sock)
        for replica in self.replicas:
            replica._reschedule()

    def stop(self) -> None:
        if self._thread is None or self.loop is None:
            return

        async def stop_all():
            await asyncio.gather(*(r.stop() for r in self.replicas), return_exceptions=True)

        try:
            self._call(stop_all(), timeout=15)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FleetSimulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _call(self, coro, timeout: float = 30.0):
        if self.loop is None or self._thread is None:
            coro.close()
            raise RuntimeError("fleet not started")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _call_sync(self, fn, *args, **kwargs):
        async def wrapper():
            return fn(*args, **kwargs)

        return self._call(wrapper())

    # ---- API

    def elapsed(self) -> float:
        """Wall seconds since the fleet started (the clock of kill_at_s / restart_at_s)."""
        return time.monotonic() - self.started_mono

    @property
    def base_urls(self) -> list[str]:
        return [r.base_url for r in self.replicas]

    @property
    def admin_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{r.port}/admin" for r in self.replicas]

    def kill(self, i: int) -> None:
        """Stop replica i: refused connections, open connections aborted, queue dropped. Blocks until done."""
        self._call(self.replicas[i].kill())

    def restart(self, i: int) -> None:
        """Serve replica i again on the same port (cold prefix cache). Blocks until it listens."""
        self._call(self.replicas[i].restart())

    def set_faults(self, i: int, **faults: Any) -> dict:
        """Partially update replica i's FaultConfig; returns the new settings."""
        return self._call_sync(self.replicas[i].set_faults, **faults)

    def set_model(self, i: int, **changes: Any) -> dict:
        """Change the weights behind replica i's served name (`root`, `parent`); returns its new
        /v1/models entry. Simulates an alias swapped to other weights."""
        return self._call_sync(self.replicas[i].set_model, **changes)

    def get_faults(self, i: int) -> dict:
        return self._call_sync(lambda: dataclasses.asdict(self.replicas[i].faults))

    def stats(self) -> list[dict]:
        """Per replica: completed, prompt/generation tokens, prefix hit/query tokens, busy_s (simulated
        seconds, = prefill_s + decode_s), seq_s (sequence-seconds: each step's cost x its batch),
        busy_wall_s, steps, max_lag_s, injected faults,
        dropped/aborted/rejected requests, kills, running/waiting, kv_cache_usage, preemptions, engines,
        open_requests/peak_open_requests..."""
        return self._call_sync(lambda: [r.stats() for r in self.replicas])

    def metrics_text(self, i: int) -> str:
        return self._call_sync(self.replicas[i].metrics_text)


# --------------------------------------------------------------------------------------------
# Standalone process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=None)
    parser.add_argument("--speeds", default="1", help="comma-separated speed per replica (one value: all)")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="sim-model")
    parser.add_argument("--root", default=None, help="the weights /v1/models reports for --model (default: --model)")
    parser.add_argument("--parent", default=None, help="a LoRA adapter's base model for /v1/models (default: none)")
    parser.add_argument("--max-model-len", type=int, default=32768)
    parser.add_argument("--max-num-seqs", type=int, default=int(CALIBRATION["max_num_seqs"]))
    parser.add_argument("--max-num-batched-tokens", type=int, default=int(CALIBRATION["max_num_batched_tokens"]))
    parser.add_argument("--kv-cache-tokens", type=int, default=0, help="KV capacity per engine (0: the default)")
    parser.add_argument("--output-tokens-mean", type=int, default=50)
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines per replica")
    parser.add_argument("--metrics-lag-s", type=float, default=0.0, help="/metrics gauges this many s old")
    parser.add_argument("--cost-model", choices=COST_MODELS, default="vllm")
    parser.add_argument("--embeddings", action="store_true", help="also serve sim-embed on /v1/embeddings")
    parser.add_argument("--embedding-dim", type=int, default=32)
    parser.add_argument("--base-port", type=int, default=0, help="replica i on base-port + i (0: ephemeral)")
    parser.add_argument("--faults", default="{}",
                        help='JSON {"<replica index>": {fault settings}}, e.g. {"1": {"error_rate": 0.1}}')
    parser.add_argument("--port-file", default=None, help="write the base URLs here as JSON once serving")
    args = parser.parse_args(argv)

    speeds = [float(s) for s in args.speeds.split(",") if s.strip()]
    n = args.replicas if args.replicas is not None else len(speeds)
    if len(speeds) == 1:
        speeds = speeds * n
    if len(speeds) != n:
        parser.error(f"--speeds has {len(speeds)} values for {n} replicas")
    faults = {int(k): v for k, v in json.loads(args.faults).items()}
    specs = [ReplicaSpec(speed=speeds[i], model_name=args.model, root=args.root, parent=args.parent,
                         max_model_len=args.max_model_len,
                         max_num_seqs=args.max_num_seqs, output_tokens_mean=args.output_tokens_mean,
                         max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_tokens=args.kv_cache_tokens,
                         engines=args.engines, metrics_lag_s=args.metrics_lag_s, cost_model=args.cost_model,
                         serve_embeddings=args.embeddings, embedding_dim=args.embedding_dim, port=(args.base_port + i) if args.base_port else 0,
                         faults=FaultConfig(**faults.get(i, {})))
             for i in range(n)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fleet = FleetSimulator(specs, time_scale=args.time_scale, seed=args.seed).start()
    try:
        info = {"base_urls": fleet.base_urls, "admin_urls": fleet.admin_urls, "pid": os.getpid(),
                "time_scale": args.time_scale, "speeds": speeds, "model": args.model,
                "root": args.root or args.model}
        if args.port_file:
            tmp = f"{args.port_file}.tmp{os.getpid()}"
            with open(tmp, "w") as fh:
                json.dump(info, fh)
            os.replace(tmp, args.port_file)
        print(json.dumps(info), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        fleet.stop()
    return 0

