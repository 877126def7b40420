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

Cost model (``cost_model="vllm"``, the default; ``bench/sim/engine.py``, ``Engine``; times in
*simulated* seconds). Each replica runs ``engines`` data-parallel engines (default 1) behind its one
port; a chat request goes to the engine with the fewest outstanding (waiting + running) requests.
Each engine is a vLLM v1 scheduler over a paged KV cache:

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

Scoring (/rerank, /score) is prefill only: a request of P prompt tokens (each (query, document) pair
is one sequence, so the query counts once per document) costs ``prefill_s_per_token * P / speed``
(2e-5 s a token),
served one request after another in a lane of its own beside the chat engines (vLLM serves a
reranker as a separate pooling model; its batches are compute-bound, so serial time is about
batched time; the ``slowdown`` fault applies too). No prefix cache, no decode. The tokens count in ``prompt_tokens`` /
``vllm:prompt_tokens`` (engine 0); ``stats()`` has ``rerank_requests``, ``score_requests`` and ``scoring_s``
(simulated seconds, not part of ``busy_s``). Faults: errors and stalls as for chat, no malformed
answers; a pair over ``max_model_len`` is a 400.

Embeddings (/v1/embeddings, when ``serve_embeddings``; model ``sim-embed``, unit vectors of
``embedding_dim``, deterministic per input text) are served in an embedding lane of their own, like
scoring: one request (a batch of inputs) at a time, costing ``embed_base_s + embed_s_per_token *
input tokens`` (1 ms + 3.5 us a token: a small GPU encoder, all-MiniLM-L6-v2 at ~14,200 sentences/s on
a V100; ``stats()["embedding_s"]``, ``embedding_requests``, ``embeddings`` (inputs)). Faults: errors and
stalls.

/metrics: per engine (label ``engine="0"``, ``engine="1"``, ... beside ``model_name``, as vLLM v1 and
its data-parallel deployments publish): gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:gpu_cache_usage_perc``; counters
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:prefix_cache_queries_total``
(tokens in full prompt blocks), ``vllm:prefix_cache_hits_total``, ``vllm:num_preemptions_total``,
``vllm:request_success_total`` (finished_reason stop / length). With ``metrics_lag_s`` > 0
(``--metrics-lag-s``) the gauges are answered as they were that many wall seconds ago (snapshots at
most every 10 ms, the last second beyond the lag kept; before the first old-enough snapshot: idle);
counters are current.

Outputs: the natural output length of a request is deterministic from a hash of its prompt (per
chunk in batch mode): lognormal with mean ``output_tokens_mean`` and sigma 0.5 (median 0.88x the mean,
90 % between 0.39x and 2x, at most 8x; legacy: +- 20 %), never below the number of words of the
content, capped by ``max_tokens`` (or ``max_completion_tokens``; default: the room left in the
context). ``usage.completion_tokens`` is that simulated count (a subword tokenizer yields more tokens
than words); when the cap is below the content's word count the content is cut to that many words
and ``finish_reason`` is ``"length"``, else ``"stop"``. The content is one sentence::

    This passage (ref 3f9a2c) covers <first five words of the <chunk> or the last user message>
    in <document title if present>.

Batch mode (``response_format`` json_object / json_schema, or ``Answer as JSON`` in the last user
message) answers ``{"headers": [{"id": ..., "header": ...}, ...]}`` with one entry per
``<chunk id="...">`` element (of the last user message, else of the whole prompt; chunks without an
id get their ordinal as a string).

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
import collections
import dataclasses
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from bench.sim.engine import (  # noqa: F401 - _unit is re-exported (bench.model_floor)
    CALIBRATION,
    COST_MODELS,
    Seq,
    _unit,
    make_engine,
    natural_length,
)

MALFORMED_MODES = ("empty", "overlong", "echo", "copy", "bad_json")
_CHUNK_RE = re.compile(r"<chunk(?P<attrs>[^>]*)>(?P<body>.*?)</chunk>", re.DOTALL)
_ID_RE = re.compile(r"""\bid\s*=\s*["']([^"']*)["']""")
_TITLE_RE = re.compile(r"""<document[^>]*\btitle\s*=\s*"([^"]*)\"""")
_WORD_CLEAN = re.compile(r"[^\w\-']+")
_ALNUM_RUN = re.compile(r"[^\W_]+")  # letters and digits; underscores split identifiers
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # diff|Executor, HTTP|Server
_STOPWORDS = frozenset({
    "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "has", "have", "how", "in",
    "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "what", "when", "where", "which",
    "who", "why", "will", "with"})
_BREVITY_WEIGHT = 0.1  # < 1: brevity orders documents with equal hits, never outweighs one more hit


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


# --------------------------------------------------------------------------------------------
# Helpers


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _clean_words(text: str, n: int) -> list[str]:
    words = []
    for raw in text.split():
        word = _WORD_CLEAN.sub("", raw)[:16]  # long identifiers would make a real header overlong
        if word:
            words.append(word)
            if len(words) == n:
                break
    return words


def header_sentence(subject_text: str, title: str | None, key: str) -> str:
    """The canned header: one sentence, under 40 words, deterministic in (subject_text, title, key)."""
    ref = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest()
    subject = " ".join(_clean_words(subject_text, 5)) or "this material"
    sentence = f"This passage (ref {ref}) covers {subject}"
    title_words = _clean_words(title or "", 8)
    if title_words:
        sentence += " in " + " ".join(title_words)
    return sentence + "."


def embedding_vector(text: str, dim: int = 32) -> list[float]:
    rng = random.Random(int.from_bytes(_digest(text), "big"))
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def content_words(text: str) -> set[str]:
    """The distinct content words of a text for ``relevance``: lowercased runs of letters and digits,
    identifiers also split at underscores and camelCase humps (``DiffExecutor`` -> diff, executor),
    without one-character words and a few English stopwords (they would match almost any document)."""
    words = set()
    for run in _ALNUM_RUN.findall(text):
        for part in _CAMEL_HUMP.split(run):
            word = part.lower()
            if len(word) > 1 and word not in _STOPWORDS:
                words.add(word)
    return words


def relevance(query: str, document: str) -> float:
    """A deterministic stand-in for a cross-encoder's relevance score, in [0, 1].

    ``(hits + w * brevity) / (wanted + w)`` with ``wanted`` the query's distinct content words, ``hits``
    those found in the document, ``brevity = 64 / (64 + document tokens)`` in (0, 1] and w = 0.1:
    essentially the share of the query's words the document covers. Since w * brevity < 1, one more
    hit always wins, so a document with all the query's words outscores one with half of them at any
    length; among equal hits the shorter (more focused) document wins, so scores rarely tie."""
    wanted = content_words(query)
    hits = len(wanted & content_words(document))
    brevity = 64 / (64 + len(document.split()))
    return (hits + _BREVITY_WEIGHT * brevity) / (len(wanted) + _BREVITY_WEIGHT)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def _error(status: int, message: str, err_type: str):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": err_type, "param": None, "code": status}},
                        status_code=status)


_FLOAT_ACCT = ("busy_s", "prefill_s", "decode_s", "busy_wall_s", "max_lag_s", "scoring_s", "embedding_s", "seq_s")
_COUNTER_FIELDS = ("prompt_tokens", "generation_tokens", "prefix_hit_tokens", "prefix_query_tokens",
                   "preemptions", "success_stop", "success_length")


# --------------------------------------------------------------------------------------------
# One replica (all methods run on the fleet's event loop)


class Replica:
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

    def _snapshot(self, e: int) -> None:
        """Record engine e's gauges for the lagged /metrics (only when metrics_lag_s > 0): at most one
        entry per 10 ms (the latest state wins), entries older than the lag + 1 s dropped."""
        lag = self.spec.metrics_lag_s
        if lag <= 0:
            return
        engine = self.engines[e]
        now = time.monotonic()
        entry = (now, len(engine.running), len(engine.waiting), engine.kv_usage())
        hist = self.history[e]
        if hist and now - hist[-1][0] < 0.01 and len(hist) > 1:
            hist[-1] = (hist[-1][0],) + entry[1:]
        else:
            hist.append(entry)
        while len(hist) > 2 and hist[1][0] < now - lag - 1.0:
            hist.popleft()

    def gauges(self, e: int) -> tuple[int, int, float]:
        """(running, waiting, kv usage) of engine e as /metrics reports them: metrics_lag_s ago."""
        engine = self.engines[e]
        lag = self.spec.metrics_lag_s
        if lag <= 0:
            return len(engine.running), len(engine.waiting), engine.kv_usage()
        target = time.monotonic() - lag
        for t, running, waiting, usage in reversed(self.history[e]):
            if t <= target:
                return running, waiting, usage
        return 0, 0, 0.0  # before the first snapshot old enough: the idle engine it was at start

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

    def metrics_text(self) -> str:
        model = self.spec.model_name.replace("\\", "\\\\").replace('"', '\\"')
        legacy = self.spec.cost_model == "legacy"
        # vLLM v1 labels every series with its engine (data parallel: one per engine); legacy: one set.
        labels = [f'model_name="{model}"'] if legacy else \
            [f'model_name="{model}",engine="{e}"' for e in range(len(self.engines))]
        cur = [{k: engine.counters[k] - offset[k] for k in _COUNTER_FIELDS}
               for engine, offset in zip(self.engines, self.metrics_offset)]
        if legacy:
            cur = [{k: sum(c[k] for c in cur) for k in _COUNTER_FIELDS}]
        gauges = [self.gauges(e) for e in range(len(self.engines))]
        if legacy:
            gauges = [(sum(g[0] for g in gauges), sum(g[1] for g in gauges), max(g[2] for g in gauges))]
        lines: list[str] = []

        def counter(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name}_total {help_text}")
            lines.append(f"# TYPE {name}_total counter")
            for labels, value in samples:
                lines.append(f"{name}_total{{{labels}}} {float(value)!r}")
            lines.append(f"# HELP {name}_created {help_text}")
            lines.append(f"# TYPE {name}_created gauge")
            for labels, _ in samples:
                lines.append(f"{name}_created{{{labels}}} {self.metrics_created!r}")

        def gauge(name: str, help_text: str, index: int) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for lbl, g in zip(labels, gauges):
                lines.append(f"{name}{{{lbl}}} {float(g[index])!r}")

        def per_engine(key: str) -> list[tuple[str, float]]:
            return [(lbl, c[key]) for lbl, c in zip(labels, cur)]

        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", 0)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1)
        # vLLM v1's name, and the name older releases (and older dashboards) read; the same value.
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 2)
        gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 2)
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", per_engine("prompt_tokens"))
        counter("vllm:generation_tokens", "Number of generation tokens processed.", per_engine("generation_tokens"))
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                per_engine("prefix_query_tokens"))
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                per_engine("prefix_hit_tokens"))
        if not legacy:
            counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                    per_engine("preemptions"))
        counter("vllm:request_success", "Count of successfully processed requests.",
                [(f'{lbl},finished_reason="{reason}"', c[f"success_{reason}"])
                 for lbl, c in zip(labels, cur) for reason in ("stop", "length")])
        return "\n".join(lines) + "\n"

    # ---- HTTP

    def _build_app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, PlainTextResponse
        from starlette.routing import Route

        async def models(request):
            data = [self.model_entry()]
            if self.spec.serve_embeddings:
                data.append({"id": self.spec.embedding_model, "object": "model",
                             "created": int(self.fleet.started_wall), "owned_by": "sim",
                             "root": self.spec.embedding_model, "parent": None,
                             "max_model_len": self.spec.max_model_len})
            return JSONResponse({"object": "list", "data": data})

        async def health(request):
            return PlainTextResponse("")

        async def metrics(request):
            return PlainTextResponse(self.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

        def admin(update, current):
            """GET answers `current()`; POST applies a JSON object's keys with `update(**body)`."""

            async def endpoint(request):
                if request.method == "POST":
                    try:
                        body = await request.json()
                        if not isinstance(body, dict):
                            raise TypeError("expected a JSON object")
                        return JSONResponse(update(**body))
                    except (ValueError, TypeError) as exc:
                        return _error(400, str(exc), "BadRequestError")
                return JSONResponse(current())

            return endpoint

        admin_faults = admin(self.set_faults, lambda: dataclasses.asdict(self.faults))
        admin_model = admin(self.set_model, self.model_entry)

        async def admin_stats(request):
            return JSONResponse(self.stats())

        return Starlette(routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route("/v1/rerank", self._rerank, methods=["POST"]),
            Route("/rerank", self._rerank, methods=["POST"]),  # vLLM serves both paths
            Route("/v1/score", self._score, methods=["POST"]),
            Route("/score", self._score, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/admin/faults", admin_faults, methods=["GET", "POST"]),
            Route("/admin/model", admin_model, methods=["GET", "POST"]),
            Route("/admin/stats", admin_stats, methods=["GET"]),
        ])

    async def _pre_faults(self):
        """Stall and error injection shared by the POST endpoints: a response, or None to go on."""
        f = self.faults
        epoch = self.epoch
        if f.stall_s > 0 and f.stall_rate > 0 and self.rng.random() < f.stall_rate:
            self.acct["stalls_injected"] += 1
            await asyncio.sleep(f.stall_s)
            if epoch != self.epoch or not self.alive:
                return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        if f.error_rate > 0 and self.rng.random() < f.error_rate:
            self.acct["errors_injected"] += 1
            return _error(500, "simulated internal server error (fault injection)", "InternalServerError")
        return None

    async def _read_json(self, request):
        try:
            body = await request.json()
        except Exception:  # noqa: BLE001 - any unparsable body
            return None, _error(400, "request body is not valid JSON", "BadRequestError")
        if not isinstance(body, dict):
            return None, _error(400, "request body must be a JSON object", "BadRequestError")
        return body, None

    def _model_error(self, body: dict):
        """404 unless the request names the served model (no name: the served one); else None."""
        model = body.get("model") or self.spec.model_name
        if model != self.spec.model_name:
            self.acct["rejected"] += 1
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        return None

    def _bad_request(self, message: str):
        self.acct["rejected"] += 1
        return _error(400, message, "BadRequestError")

    async def _chat(self, request):
        body, err = await self._read_json(request)
        if err is not None:
            return err
        self.open_requests += 1
        self.peak_open_requests = max(self.peak_open_requests, self.open_requests)
        try:
            return await self._until_disconnect(request, self._chat_answer(body))
        finally:
            self.open_requests -= 1

    async def _until_disconnect(self, request, answer):
        """The response of coroutine `answer`, or a 499 as soon as the client goes away (stalled or in
        the engine): the work is cancelled and counted as aborted, as vLLM aborts a disconnected request."""
        epoch = self.epoch
        task = asyncio.ensure_future(answer)
        watcher = asyncio.ensure_future(_wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
        if task in done:
            return task.result()
        if epoch == self.epoch:  # a kill's dropped connections are not client aborts
            self.acct["aborted"] += 1
        return _error(499, "client disconnected", "ClientClosedRequest")

    async def _chat_answer(self, body: dict):
        from starlette.responses import JSONResponse

        spec = self.spec
        err = self._model_error(body)
        if err is not None:
            return err
        if body.get("stream"):
            self.acct["rejected"] += 1
            return _error(400, "the fleet simulator does not stream; send stream=false", "BadRequestError")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self.acct["rejected"] += 1
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        fault = await self._pre_faults()
        if fault is not None:
            return fault

        parts = []
        last_user = ""
        for m in messages:
            if not isinstance(m, dict):
                continue
            text = _message_text(m.get("content"))
            parts.append(f"{m.get('role', '')} {text}")
            if m.get("role") == "user":
                last_user = text
        prompt = "\n".join(parts)
        tokens = prompt.split()
        n_prompt = len(tokens)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        room = spec.max_model_len - n_prompt
        if max_tokens is None:
            if room < 1:
                self.acct["rejected"] += 1
                return _error(400, self._ctx_message(n_prompt, 0), "BadRequestError")
            max_tokens = room
        if not isinstance(max_tokens, int) or max_tokens < 1:
            self.acct["rejected"] += 1
            return _error(400, "max_tokens must be a positive integer", "BadRequestError")
        if n_prompt + max_tokens > spec.max_model_len:
            self.acct["rejected"] += 1
            return _error(400, self._ctx_message(n_prompt, max_tokens), "BadRequestError")

        content, natural = self._answer(body, prompt, last_user)
        words = content.split(" ") if content else []
        target = min(natural, max_tokens)
        finish = "stop"
        if target < len(words):
            content = " ".join(words[:target])
            finish = "length"
        if not self.engines[0].fits_ever(n_prompt, target):
            self.acct["rejected"] += 1
            return _error(400, f"The request needs {n_prompt + target} tokens of KV cache ({n_prompt} prompt, "
                               f"{target} output) but the engine holds {self.engines[0].num_blocks} blocks of "
                               f"{spec.block_size} tokens; it can never be scheduled.", "BadRequestError")

        try:
            generated, e = await self.generate(tokens, target)
        except ReplicaDown:
            return _error(503, "replica is shutting down", "ServiceUnavailableError")
        self.engines[e].counters["success_length" if finish == "length" else "success_stop"] += 1
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": spec.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": generated,
                      "total_tokens": n_prompt + generated},
        })

    def _ctx_message(self, n_prompt: int, max_tokens: int) -> str:
        return (f"This model's maximum context length is {self.spec.max_model_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion.")

    def _answer(self, body: dict, prompt: str, last_user: str) -> tuple[str, int]:
        """(content, natural output length in tokens) for a request, faults included."""
        mean = self.spec.output_tokens_mean
        rf = body.get("response_format")
        batch = (isinstance(rf, dict) and rf.get("type") in ("json_object", "json_schema")) \
            or "Answer as JSON" in last_user
        chunks = list(_CHUNK_RE.finditer(last_user)) or list(_CHUNK_RE.finditer(prompt))
        title_match = _TITLE_RE.search(last_user) or _TITLE_RE.search(prompt)
        title = title_match.group(1) if title_match else None
        f = self.faults
        malformed = None
        matches = f.malformed_match is None or any(f.malformed_match in c.group("body") for c in chunks)
        if f.malformed is not None and matches and f.malformed_rate > 0 and self.rng.random() < f.malformed_rate:
            malformed = f.malformed
            self.acct["malformed_injected"] += 1

        def jitter(key: str) -> int:
            return natural_length(key, mean, self.spec.cost_model)

        if malformed == "empty":
            return "", 1
        if malformed == "overlong":
            filler = ("and the passage goes on to discuss how this relates to the wider document and its many "
                      "sections which in turn connect to further themes").split()
            text = " ".join(filler[i % len(filler)] for i in range(400))
            return text, 400
        if malformed == "echo":
            return last_user, len(last_user.split(" "))
        if malformed == "copy":
            text = " ".join((chunks[0].group("body") if chunks else last_user).split())
            return text, len(text.split(" "))
        if malformed == "bad_json":
            ident = _ID_RE.search(chunks[0].group("attrs")) if chunks else None
            text = '{"headers": [{"id": "%s", "header": "This passage covers' % (ident.group(1) if ident else "0")
            return text, jitter(prompt)

        if batch:
            entries = []
            natural = 0
            for i, m in enumerate(chunks):
                ident_match = _ID_RE.search(m.group("attrs"))
                ident = ident_match.group(1) if ident_match else str(i)
                key = f"{prompt}\x00{ident}"
                entries.append({"id": ident, "header": header_sentence(m.group("body"), title, key)})
                natural += jitter(key)
            text = json.dumps({"headers": entries}, ensure_ascii=False)
            return text, max(natural, len(text.split(" ")), 1)
        subject = chunks[-1].group("body") if chunks else last_user
        text = header_sentence(subject, title, prompt)
        return text, max(jitter(prompt), len(text.split(" ")))

    async def _embeddings(self, request):
        from starlette.responses import JSONResponse

        if not self.spec.serve_embeddings:
            return _error(404, "this replica serves no embedding model", "NotFoundError")
        body, err = await self._read_json(request)
        if err is not None:
            return err
        model = body.get("model") or self.spec.embedding_model
        if model != self.spec.embedding_model:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            return _error(400, "input must be a string or a list of strings", "BadRequestError")
        fault = await self._pre_faults()
        if fault is not None:
            return fault
        n_tokens = sum(len(x.split()) for x in inputs)
        err = await self._embedding_time(n_tokens)
        if err is not None:
            return err
        self.acct["embeddings"] += len(inputs)
        self.acct["embedding_requests"] += 1
        return JSONResponse({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": embedding_vector(x, self.spec.embedding_dim)}
                     for i, x in enumerate(inputs)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        })

    # ---- scoring (cross-encoder endpoints)

    async def _scoring_body(self, request):
        """(JSON body, None), or (None, the error answer) for a bad body or another model's name."""
        body, err = await self._read_json(request)
        if err is None:
            err = self._model_error(body)
        return (None, err) if err is not None else (body, None)

    async def _rerank(self, request):
        """POST /v1/rerank and /rerank: documents by relevance to the query, best first, top_n of them."""
        from starlette.responses import JSONResponse

        body, err = await self._scoring_body(request)
        if err is not None:
            return err
        query, documents, top_n = body.get("query"), body.get("documents"), body.get("top_n")
        if not isinstance(query, str) or not query.strip():
            return self._bad_request("query must be a non-empty string")
        if not _is_str_list(documents):
            return self._bad_request("documents must be a list of strings")
        if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool)):
            return self._bad_request("top_n must be an integer")
        scores, n_tokens, err = await self._score_pairs([(query, d) for d in documents])
        if err is not None:
            return err
        self.acct["rerank_requests"] += 1
        # Stable sort: equal scores keep the documents' order. top_n <= 0 means all, as in vLLM.
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        if top_n is not None and top_n > 0:
            order = order[:top_n]
        return JSONResponse({
            "id": f"rerank-{uuid.uuid4().hex}", "model": self.spec.model_name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "results": [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]}
                        for i in order],
        })

    async def _score(self, request):
        """POST /v1/score and /score: one score per (text_1, text_2) pair, 1:N or N:N, in input order."""
        from starlette.responses import JSONResponse

        body, err = await self._scoring_body(request)
        if err is not None:
            return err
        sides = []
        for key in ("text_1", "text_2"):
            value = body.get(key)
            value = [value] if isinstance(value, str) else value
            if not _is_str_list(value) or not value:
                return self._bad_request(f"{key} must be a string or a non-empty list of strings")
            sides.append(value)
        firsts, seconds = sides
        if len(firsts) == 1:  # 1:N; vLLM broadcasts a one-item list as it does a string
            firsts = firsts * len(seconds)
        elif len(firsts) != len(seconds):
            return self._bad_request(f"text_1 and text_2 must be 1:1, 1:N or N:N, got {len(firsts)} and "
                                     f"{len(seconds)} items")
        scores, n_tokens, err = await self._score_pairs(list(zip(firsts, seconds)))
        if err is not None:
            return err
        self.acct["score_requests"] += 1
        return JSONResponse({
            "id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
            "model": self.spec.model_name,
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens, "completion_tokens": 0},
        })

    async def _score_pairs(self, pairs: list[tuple[str, str]]):
        """(scores, prompt tokens, None), or (None, 0, error response): faults, the context limit per
        pair, then the prefill time of every pair (a cross-encoder reads query and document together)."""
        fault = await self._pre_faults()
        if fault is not None:
            return None, 0, fault
        lengths = [len(q.split()) + len(d.split()) for q, d in pairs]
        longest = max(lengths, default=0)
        if longest > self.spec.max_model_len:
            return None, 0, self._bad_request(
                f"This model's maximum context length is {self.spec.max_model_len} tokens. However, you requested "
                f"{longest} tokens in the input for scoring. Please reduce the length of the input.")
        n_tokens = sum(lengths)
        err = await self._scoring_time(n_tokens)
        if err is not None:
            return None, 0, err
        self.engines[0].counters["prompt_tokens"] += n_tokens
        return [relevance(q, d) for q, d in pairs], n_tokens, None

    async def _embedding_time(self, n_tokens: int):
        """Wait out an embedding request in the replica's embedding lane (FIFO, one batch at a time, a
        small GPU encoder: embed_base_s + embed_s_per_token * input tokens, legacy: instant); None, or a
        503 when the replica was killed meanwhile."""
        spec = self.spec
        if spec.cost_model == "legacy":
            return None
        cost = (spec.embed_base_s + spec.embed_s_per_token * n_tokens) * self.faults.slowdown / spec.speed
        loop = asyncio.get_running_loop()
        epoch = self.epoch
        done_at = max(loop.time(), self.embedding_free_at) + cost * self.fleet.time_scale
        self.embedding_free_at = done_at
        self.acct["embedding_s"] += cost
        await asyncio.sleep(max(0.0, done_at - loop.time()))
        if epoch != self.epoch or not self.alive:
            return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        return None

    async def _scoring_time(self, n_tokens: int):
        """Wait out a scoring request's prefill in the replica's scoring lane (FIFO, one request at a
        time); None, or a 503 when the replica was killed meanwhile."""
        spec = self.spec
        cost = spec.prefill_s_per_token * max(1, n_tokens) * self.faults.slowdown / spec.speed
        loop = asyncio.get_running_loop()
        epoch = self.epoch
        # Each request's end is fixed on arrival from the lane's own clock, so sleep overshoot does not
        # add up across a queue of requests.
        done_at = max(loop.time(), self.scoring_free_at) + cost * self.fleet.time_scale
        self.scoring_free_at = done_at
        self.acct["scoring_s"] += cost
        await asyncio.sleep(max(0.0, done_at - loop.time()))
        if epoch != self.epoch or not self.alive:
            return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        return None


async def _wait_disconnect(request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


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

