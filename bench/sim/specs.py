"""Replica and fault configuration of the fleet simulator (bench/sim/fleet.py): ``ReplicaSpec``,
``FaultConfig``, ``ReplicaDown``; the cost model and calibration they parameterise.

Cost model (``cost_model="vllm"``, the default; ``bench/sim/engine.py``, ``Engine``, its step schedule in
``bench/sim/scheduler.py``; times in *simulated* seconds). Each replica runs ``engines`` data-parallel
engines (default 1) behind its one port; a chat request goes to the engine with the fewest outstanding
(waiting + running) requests. Each engine is a vLLM v1 scheduler over a paged KV cache:

* KV pool: ``kv_cache_tokens`` (default 589,824) in blocks of ``block_size`` (16) tokens. A running
  sequence references the blocks of its prompt and generated tokens; a new block is taken when its
  next token starts one;
* admission (FCFS, head of line, as vLLM v1): the head of the waiting queue is admitted when there
  are fewer than ``max_num_seqs`` (default 256) running sequences and blocks for its whole uncached
  prompt fit in the free pool; nothing behind it jumps the queue. Long prompts exhaust the KV pool
  before the sequence cap (4,000-token prompts: 147 at a time, not 256). A request whose prompt plus
  output can never fit (even alone) is a 400 at arrival;
* prefix cache in the same pool: a block's hash covers every token up to and including it (only
  identical leading blocks hit). Full prompt blocks are published when the step that computes them is
  scheduled (vLLM v1's allocate_slots -> cache_blocks), so a request admitted later in the same step hits them; when a
  sequence finishes (or is preempted) its blocks are freed but keep their cached content, in an LRU
  free queue (a sequence's tail blocks first), until a new block is needed and the oldest free block
  is evicted. Blocks referenced by running sequences are never evicted. A hit skips the prefill of
  those tokens (at least one token is always computed);
* preemption by recomputation: when a running sequence needs a block for its next token and the free
  queue is empty, the most recently admitted running sequence (maybe itself) is preempted: its blocks
  freed, put back at the head of the waiting queue, and when readmitted its prompt plus the tokens it
  had generated are prefilled again. No admission in a step that preempted. Counted in
  ``vllm:num_preemptions_total`` and ``stats()["preemptions"]``;
* engine steps with a token budget, ``max_num_batched_tokens`` (default 2,048): first one decode token
  per running sequence, then prefill chunks of running sequences still in prefill, then newly
  admitted ones, until the budget is spent (chunked prefill). A sequence generates nothing until its
  prompt is fully prefilled; the step that completes it generates its first token;
* step cost (a roofline)::

      step_s = step_overhead_s + max(weights_read_s + kv_read_s_per_token * context tokens read,
                                     compute_s_per_token * tokens computed)

  with context tokens read = for each scheduled sequence its computed tokens plus those it computes
  in the step, and tokens computed = decode tokens + prefill chunk tokens. ``busy_s`` is split into
  ``prefill_s`` / ``decode_s`` by the step's token shares;
* ``vllm:kv_cache_usage_perc`` (and the older ``vllm:gpu_cache_usage_perc``, the same value) = blocks
  referenced by running sequences / all blocks, as vLLM reports it: cached-but-free blocks do not
  count. ``stats()["kv_cache_usage"]`` is the fullest engine's;
* every cost is divided by the replica's ``speed`` (and multiplied by the ``slowdown`` fault); the
  engine sleeps ``cost * time_scale`` real seconds per step, against a deadline (sleep overshoot is
  caught up on the next step, so wall time tracks simulated time as long as the CPU keeps up;
  ``stats()["max_lag_s"]`` says how far behind it ever got).

Calibration (``engine.CALIBRATION``; each figure's source is in engine.py): Llama-3.2-3B in bf16 on
one A100-SXM4-80GB (2,039 GB/s, 312 TFLOPS bf16), vLLM v1's A100 OpenAI-server defaults:

* ``weights_read_s = 3.15e-3``       6.43 GB of weights / 2,039 GB/s, once per step
* ``kv_read_s_per_token = 5.6e-8``   28 layers x 8 KV heads x 128 x 2 x 2 B = 112 KiB per token
* ``compute_s_per_token = 4.1e-5``   2 x 3.21e9 FLOPs / (312 TFLOPS x 50 % MFU)
* ``step_overhead_s = 2.5e-3``       scheduling, sampling, launches (estimate: 175 tokens/s alone)
* ``kv_cache_tokens = 589,824``      ~63 GiB of KV at gpu_memory_utilization 0.9 / 112 KiB a token
* ``max_num_batched_tokens = 2048``, ``max_num_seqs = 256``: vLLM's EngineArgs.get_batch_defaults
  for the API server on an A100 (H100-class GPUs: 8,192 and 1,024)

Cross-check: the field report in the project's context (four Granite 3B FP16 replicas on RTX 3090s at
~16 requests in flight each: ~20K tokens/s, ~5K per card) matches the same 50 % MFU on a 3090
(5.5K tokens/s, compute-bound prefill). One replica (speed 1) at concurrency C, closed loop
(``throughput_model.closed_loop_throughput``), in requests/s (output tokens/s)::

    request                          C=1          C=16          C=64           C=256
    1,000 + 50, distinct prompts     3.1 (155)    16.7 (836)    21.7 (1,087)   22.6 (1,129)
    1,000 + 50, 900 shared prefix    3.5 (175)    41.5 (2,074)  89.5 (4,475)   129.1 (6,457)
    100 + 200                        0.9 (176)    13.0 (2,606)  41.9 (8,375)   70.2 (14,037)
    4,000 + 50                       2.2 (109)    5.5 (276)     5.9 (293)      5.8 (292)

Uncached 1,000-token prompts are compute-bound on prefill (1,049 computed tokens x 41 us = 43 ms
a request: ~23 requests/s at best), so their knee is below 16 sequences; when the prompt is mostly
cached (one document's chunks) or the output long, decode steps are bound by the weight reads and
fill up almost for free: the knee is well above 16 (64 vs 16: 2.2x and 3.2x; 256 vs 16: 3.1x, 5.4x). 4,000-token prompts
saturate prefill compute at ~24K prompt tokens/s.

Legacy cost model (``cost_model="legacy"``, ``--cost-model legacy``; ``LegacyEngine``), kept only to
compare against: at most ``max_num_seqs`` sequences run, the others wait in FIFO order; each
iteration admits waiting requests while there is room, their prefill costs ``prefill_s_per_token *
uncached prompt tokens`` (a separate LRU prefix cache of ``prefix_cache_blocks`` blocks), then one
decode step for all running sequences costs ``decode_base_s + decode_s_per_ctx_token * sum(context
tokens)`` (2e-5, 6 ms, 6e-7); no KV bound, no preemption, no token budget, outputs mean +- 20 %;
the KV gauge is the running tokens over ``kv_cache_tokens`` (0: ``max_num_seqs * 2048``), capped at
1; /metrics has one label set (no ``engine`` label, no preemption counter); embeddings are instant.

Faults (``FaultConfig``; construction, ``FleetSimulator.set_faults`` or ``POST /admin/faults``):

* ``error_rate``: HTTP 500 with an OpenAI-style error body (chat, embeddings, rerank and score);
* ``stall_s`` / ``stall_rate``: the request sleeps ``stall_s`` *wall* seconds before it is processed
  (a replica that accepts connections and never answers: a large ``stall_s``, ``stall_rate`` 1);
* ``slowdown`` (>= 1): every engine cost of the replica (engine step, scoring, embedding) is multiplied by
  it, read at each engine iteration, so setting it mid-run slows the replica from its next step (a
  GPU that degrades for the tail of a run); 1 is healthy;
* ``kill_at_s`` / ``restart_at_s``: *wall* seconds after fleet start. A kill closes the listening
  socket (new connections: ``ConnectionRefusedError`` / ``httpx.ConnectError``), aborts every open
  connection (in-flight requests see ``httpx.RemoteProtocolError`` "Server disconnected" or a
  reset, ``httpx.ReadError``), and drops the engine's queue and prefix cache. A restart listens
  again on the same port with a cold cache and with /metrics counters reset (as a restarted
  process would); ``stats()`` keeps cumulative totals;
* ``malformed`` in {"empty", "overlong", "echo", "copy", "bad_json"} with ``malformed_rate``:
  empty content; a run-on text of 400 words with no sentence end (cut by max_tokens, finish_reason
  "length"); the last user message echoed back; (extra) the chunk text copied verbatim; invalid JSON
  (in any mode); with ``malformed_match`` only requests whose chunk text holds that string (a model
  that fails on one passage);
* draws are made from a per-replica ``random.Random(seed)``, in arrival order: the sequence of
  outcomes is deterministic for a given seed, which request gets which depends on arrival order.

Other status codes: 400 when prompt + max_tokens exceeds max_model_len ("maximum context length"),
when prompt + output can never fit in the engine's KV pool (vllm cost model),
for ``stream=true`` and for malformed bodies; 404 for an unknown model; 503 for a request that
survives a kill without its connection (only seen if the client connection outlived the abort).
A client that disconnects (timeout, a cancelled hedge) has its chat request aborted, as vLLM does:
dropped from the engine, or its stall cut short; ``stats()["aborted"]`` counts them (not the requests
a kill drops: ``dropped``). ``stats()["open_requests"]`` is the number of chat requests inside the
handler, from their parsed body to their answer or their client's disconnect (stalled ones included);
``peak_open_requests`` its maximum since the fleet started (kills and restarts keep it): the most
requests all clients together ever had in flight on that replica.
Idle keep-alive connections are closed after 5 s (vLLM's uvicorn default). Under heavy concurrency
an httpx client sees a rare ``httpx.ReadError`` on a reused keep-alive connection (about 1 in
2,000 requests at 256 in flight); the same happens against a bare uvicorn app, so clients should
retry transport errors, as they must against vLLM. A kill_at_s in the past set through the admin
endpoint may kill the replica before that very answer is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.sim.engine import (
    CALIBRATION,
    COST_MODELS,
)

_FLOAT_ACCT = ("busy_s", "prefill_s", "decode_s", "busy_wall_s", "max_lag_s", "scoring_s", "embedding_s", "seq_s")
_COUNTER_FIELDS = ("prompt_tokens", "generation_tokens", "prefix_hit_tokens", "prefix_query_tokens",
                   "preemptions", "success_stop", "success_length")
MALFORMED_MODES = ("empty", "overlong", "echo", "copy", "bad_json")



# --------------------------------------------------------------------------------------------
# Specs


@dataclass
class FaultConfig:
    """Fault injection of one replica. Times (stall_s, kill_at_s, restart_at_s) are wall seconds."""

    error_rate: float = 0.0
    stall_s: float = 0.0
    stall_rate: float = 1.0  # with stall_s > 0: the share of requests that stall
    kill_at_s: float | None = None  # relative to fleet start
    restart_at_s: float | None = None
    malformed: str | None = None  # one of MALFORMED_MODES
    malformed_rate: float = 1.0
    # With `malformed`: only requests whose chunk text holds this (a model that fails on one passage)
    malformed_match: str | None = None
    slowdown: float = 1.0  # every engine cost of the replica times this (a degraded GPU), from the next step
    seed: int | None = None  # None: the fleet seed + the replica index

    def validate(self) -> None:
        for name in ("error_rate", "stall_rate", "malformed_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.stall_s < 0:
            raise ValueError("stall_s must be >= 0")
        if not self.slowdown >= 1.0:  # also rejects NaN
            raise ValueError(f"slowdown must be >= 1.0, got {self.slowdown}")
        if self.malformed is not None and self.malformed not in MALFORMED_MODES:
            raise ValueError(f"malformed must be one of {MALFORMED_MODES} or null, got {self.malformed!r}")


@dataclass
class ReplicaSpec:
    """One simulated vLLM replica. Costs are simulated seconds (see the module docstring)."""

    speed: float = 1.0  # 1.0 nominal; 0.775 = every cost / 0.775 (29 % slower)
    model_name: str = "sim-model"
    root: str | None = None  # the weights /v1/models reports for model_name (None: model_name itself)
    parent: str | None = None  # a LoRA adapter's base model (None: not an adapter)
    max_model_len: int = 32768
    max_num_seqs: int = 256  # vLLM's default for the OpenAI server on an A100 (engine.py, CALIBRATION)
    block_size: int = 16
    prefix_cache_blocks: int = 20000  # legacy cost model only (vllm: the cache shares the KV pool)
    # KV-cache capacity in tokens, per engine; 0: the default, 589,824 (Llama-3.2-3B on an A100-80GB at
    # gpu_memory_utilization 0.9) for "vllm", max_num_seqs * 2048 (a gauge only) for "legacy".
    kv_cache_tokens: int = 0
    # Legacy cost model (cost_model="legacy") coefficients; also the scoring lane's cost per token.
    prefill_s_per_token: float = 2e-5
    decode_base_s: float = 0.006
    decode_s_per_ctx_token: float = 6e-7
    output_tokens_mean: int = 50
    serve_embeddings: bool = False
    embedding_model: str = "sim-embed"
    embedding_dim: int = 32
    port: int = 0  # 0: an ephemeral port, kept across kill/restart
    faults: FaultConfig = field(default_factory=FaultConfig)
    cost_model: str = "vllm"  # "vllm", or "legacy": the old model, only to compare against
    max_num_batched_tokens: int = int(CALIBRATION["max_num_batched_tokens"])  # per engine step
    # vllm step cost: step_overhead_s + max(weights_read_s + kv_read_s_per_token * context tokens read,
    #                                       compute_s_per_token * tokens computed)
    step_overhead_s: float = CALIBRATION["step_overhead_s"]
    weights_read_s: float = CALIBRATION["weights_read_s"]
    kv_read_s_per_token: float = CALIBRATION["kv_read_s_per_token"]
    compute_s_per_token: float = CALIBRATION["compute_s_per_token"]
    engines: int = 1  # data-parallel engines behind the one port, each its own scheduler and KV pool
    metrics_lag_s: float = 0.0  # /metrics gauges as they were this many wall seconds ago
    embed_base_s: float = CALIBRATION["embed_base_s"]  # per /v1/embeddings request
    embed_s_per_token: float = CALIBRATION["embed_s_per_token"]  # per input token

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError("speed must be > 0")
        if self.max_num_seqs < 1 or self.block_size < 1:
            raise ValueError("max_num_seqs and block_size must be >= 1")
        if self.kv_cache_tokens < 0:
            raise ValueError("kv_cache_tokens must be >= 0 (0: the cost model's default)")
        if self.cost_model not in COST_MODELS:
            raise ValueError(f"cost_model must be one of {COST_MODELS}, got {self.cost_model!r}")
        if self.engines < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("engines and max_num_batched_tokens must be >= 1")
        if not self.metrics_lag_s >= 0:
            raise ValueError("metrics_lag_s must be >= 0")
        if self.cost_model == "vllm" and (self.kv_cache_tokens or CALIBRATION["kv_cache_tokens"]) < self.block_size:
            raise ValueError("kv_cache_tokens must hold at least one block")
        if isinstance(self.faults, dict):
            self.faults = FaultConfig(**self.faults)
        self.faults.validate()


class ReplicaDown(Exception):
    """Raised into in-flight requests when their replica is killed."""

