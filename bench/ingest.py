"""Ingest throughput on the fleet simulator: model floor, floor, platform (a real UI backfill),
legacy loop and the peers, every wall timed from submission to the last commit.

    python -m bench.ingest --workload seed --runs 3 --json bench/out/ingest_seed.json
    python -m bench.ingest --workload seed --time-scales 0.5,1,2,4,8 --json ...   # a sweep

Fleet: 4 simulated vLLM replicas (speeds 1, 1, 0.775, 0.775) with the simulator's vLLM-like engine
(bench/sim/: `max_num_seqs` 256, KV-bounded admission, preemption, chunked prefill), run as a
separate process with a cold cache for every measurement. **No `max_in_flight` is configured**: the
platform's pool finds each replica's useful concurrency (`--cap N` configures a ceiling, reported as
`cap_configured`). `--time-scale X` (real seconds per simulated second, default 1: the modelled GPU)
fixes the scale; `--time-scales` sweeps it and the headline is the worst scale's. `--embedder remote`
(default) embeds through a simulated GPU embedding server (`/v1/embeddings` with a GPU-like cost), as a
deployment with a GPU embedder or TEI does; `--embedder local` embeds with MiniLM on this CPU.
`--cost-model legacy` runs the simulator's old cost model, to compare.

Headline (`wall_over_model_floor`): wall from submission to the last commit over the model floor
(`model_floor_s`, bench/model_floor.py: the simulator's cost model alone, ideal packing, never
through the platform's pool), for the platform and every peer alike. Beside it the reachable floor
(`oracle_floor_s`, `wall_over_oracle`; bench/oracle_floor.py: the simulator's own engines in simulated
time, every request at t=0, or at its file's drop for the stream, split by the best of several
oracles) and `platform_minus_floor_s` (what Dagster adds to the pool alone in the same round).

* floor: every header request of the corpus sent straight to the fleet through the platform's own
  request pool, all at once: a diagnostic of the pool, never a headline;
* platform: a backfill of every document partition launched through the webserver's GraphQL API
  (the UI's mutation), executed by `dagster-daemon` with the run queue and executor shipped in
  dagster.yaml: real parsing, headers from the fleet, embedding, commits to DuckDB. wall_s runs from
  the backfill's submission to the last commit (`launch_to_commit_s` and `submit_to_launch_s` apart);
* legacy: the same components in a document-by-document loop in this process;
* peer_llamaindex, peer_cookbook (bench/peers.py, the `bench` extra): what a user would run instead,
  with its own prompt and with the platform's requests (`peer_x:ours`), each behind a random draw over
  the replicas and behind a least-outstanding-requests balancer (`--balancers`), from the files to
  one bulk insert. JSON `peers`: per peer, prompt and balancer, the median over the rounds of each
  round's peer wall over its platform wall (`over_platform`) with a 95 % bootstrap interval.

Fleet figures: `utilization` (the engines' busy time over replicas x wall), `mean_batch_occupancy`
(mean running sequences while busy over max_num_seqs), `idle_while_pending_s` (fleet-seconds with
nothing running on a replica between the first and the last admission, weighted per replica),
`preemptions`, each replica's share of requests against its capacity share, its peak of open
requests (all clients) and its peak batch (`overshoot`: open over running, the requests all clients
held beyond what the engine ran).

Workloads (--workload; --documents N resizes those with a document count):

* seed, codebase, small: long PDFs, the codebase set, 200 short notes (platform = one backfill);
* skewed: 40 Markdown documents, one of them 15x the median chunk count and named to sort last;
* stream: 2,000 small-to-medium Markdown documents dropped into the inbox in --waves waves and
  ingested by the `new_documents` sensor of a real daemon, in as many runs as it makes, timed from
  the first drop; `run_boundaries` has the gap between consecutive runs' commits and the idle time
  inside it;
* shared-fleet: `--processes` `ctx ingest` processes at once (a part of the corpus each, Postgres
  store) on one fleet of unequal replicas (speeds 1, 1, 0.6, 0.4), each part >= 30 s of model-floor
  work (`fleet_work_s_per_process`); `work_share_error` compares engine work, not requests;
* kv-stress: long header prompts (4,000-token context) on replicas with a 12 GB card's KV pool
  (bench/ingest_workloads.py): admission stops at the KV bound and the engines preempt.

Every mode records the simulator's own lateness (`sim_max_lag_s`, `sim_lost_s`) and is marked
`sim_valid` against bench/sim_validity.py's bound; the summary lists `invalid_rounds`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.fleet_share import work_share_figures
from bench.ingest_workloads import (
    WORKLOAD_OPTIONS,
    build_codebase,
    build_kv_stress,
    build_seed,
    build_shared_parts,
    build_skewed,
    build_small,
    build_stream,
)
from bench.model_floor import CostModel, engine_speeds, floor_figures
from bench.report import write_json
from bench.run_events import cpu_ms_per_event, event_counts, first_request_after
from bench.sim import ReplicaSpec, SimFleet
from bench.sim_validity import lag_flag, sim_lag, validity_summary, with_sim_validity

SPEEDS = (1.0, 1.0, 0.775, 0.775)


@dataclass
class BenchOptions:
    """What a run of the bench varies (set once by `main`): the simulator's engine, the client's
    ceiling, the embedder's placement and the Dagster instance's ingest slots."""

    cap: int | None = None  # --cap: max_in_flight per replica (None: none configured, found by the pool)
    max_num_seqs: int = 256  # --max-num-seqs: the simulator's batch size (vLLM's default)
    cost_model: str = "vllm"  # --cost-model legacy: the old simulator, to compare
    engines: int = 1  # --engines: data-parallel engines per replica
    metrics_lag_s: float = 0.0  # --metrics-lag-s: how old the simulator's gauges are
    embedder: str = "remote"  # --embedder: remote (a GPU-like /v1/embeddings server) or local (MiniLM on the CPU)
    ingest_slots: int | None = None  # --ingest-slots: the ctx_ingest pool limit of the bench's Dagster instance
    processes: int = 2  # --processes: shared-fleet's ingest processes on one fleet
    dagster_storage: str = "sqlite"  # --dagster-storage: the instance's storage, sqlite (shipped) or postgres (deploy/)
    peer_workers: int = 64  # the peers' thread pools (a user's choice; the platform has no such knob)
    daemon_first: bool = False  # --daemon-first: the UI backfill meets a daemon already running (0-30 s pick-up)
    kv_cache_tokens: int = 0  # the simulator's KV pool per engine (0: its default; kv-stress: a smaller card's)
    context_tokens: int | None = None  # the header context budget (None: the platform's default; kv-stress: 4,000)

    def sim_spec(self) -> ReplicaSpec:
        """What `SimFleet.start` serves: the model floor's and the oracle floor's engines."""
        return ReplicaSpec(max_num_seqs=self.max_num_seqs, cost_model=self.cost_model, engines=self.engines,
                           kv_cache_tokens=self.kv_cache_tokens)


OPTIONS = BenchOptions()
CPU_MS_PER_EVENT: dict[str, float] = {}  # measured once per invocation (`main`), per Dagster storage
EMBED_MODEL = "sim-embed"
EMBED_DIM = 384  # MiniLM's: the index is the same shape whichever embedder serves it
REPO_ROOT = Path(__file__).resolve().parent.parent


# Reads OPTIONS.processes, so it lives beside them.
def build_shared_fleet(dest: Path, documents: int | None = None, paragraphs: int = 60) -> list[Path]:
    """`--processes` parts in folders a/, b/, ..., one per `ctx ingest` process of `run_shared_fleet`
    (`documents` in all; default SHARED_FLEET_DOCUMENTS_PER_PROCESS each)."""
    return build_shared_parts(dest, OPTIONS.processes, documents, paragraphs)


WORKLOADS = {"seed": build_seed, "codebase": build_codebase, "small": build_small, "skewed": build_skewed,
             "stream": build_stream, "shared-fleet": build_shared_fleet, "kv-stress": build_kv_stress}
# Fleets other than SPEEDS: two processes sharing unequal replicas.
WORKLOAD_SPEEDS = {"shared-fleet": (1.0, 1.0, 0.6, 0.4)}


def workload_speeds(workload: str) -> tuple[float, ...]:
    return WORKLOAD_SPEEDS.get(workload, SPEEDS)


# ---- the simulated fleet, one cold process per measurement -----------------------------------------

def start_fleet(workdir: Path, time_scale: float, speeds: tuple[float, ...] = SPEEDS) -> SimFleet:
    try:
        return SimFleet.start(workdir, time_scale, speeds=speeds, max_num_seqs=OPTIONS.max_num_seqs,
                              cost_model=OPTIONS.cost_model, engines=OPTIONS.engines,
                              metrics_lag_s=OPTIONS.metrics_lag_s, kv_cache_tokens=OPTIONS.kv_cache_tokens)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from exc


class EmbedServer:
    """`--embedder remote`: one simulated GPU embedding server (`/v1/embeddings`, a GPU-like cost
    model), as a deployment with a GPU embedder or TEI has; started per measurement like the fleet."""

    def __init__(self, workdir: Path, time_scale: float):
        self.sim = None
        if OPTIONS.embedder == "remote":
            try:
                self.sim = SimFleet.start(workdir, time_scale, speeds=(1.0,), serve_embeddings=True,
                                          embedding_dim=EMBED_DIM)
            except RuntimeError as exc:
                raise SystemExit(str(exc)) from exc

    def env(self) -> dict[str, str]:
        """The platform's settings for it (none for the local embedder)."""
        if self.sim is None:
            return {}
        return {"CTX_EMBED_BASE_URL": self.sim.base_urls[0], "CTX_EMBED_MODEL": EMBED_MODEL}

    def embedder(self):
        """The embedder the legacy loop and the peers use (the local one loaded beforehand)."""
        if self.sim is None:
            return loaded_embedder()
        from contextual_assets.embedding import OpenAIEmbedder

        return OpenAIEmbedder(self.sim.base_urls[0], EMBED_MODEL)

    def stop(self) -> None:
        if self.sim is not None:
            self.sim.stop()


def fleet_figures(sim: SimFleet, timeline, speeds: tuple[float, ...] = SPEEDS, time_scale: float | None = None) -> dict:
    """Shares per replica, each replica's peak of open requests (all clients together; None from a
    simulator without the key), its engine's busy time and mean batch, the idle time of the sampled
    /metrics timeline, and how far the simulator fell behind (`sim_lag`; `time_scale`: its scale)."""
    stats = sim.stats()
    completed = [s["completed"] for s in stats]
    total = sum(completed) or 1
    capacity = [s / sum(speeds) for s in speeds]
    share = [c / total for c in completed]
    figures = {
        "replica_share": [round(x, 4) for x in share],
        "capacity_share": [round(x, 4) for x in capacity],
        "share_max_relative_error": round(max(abs(a - b) / b for a, b in zip(share, capacity)), 4),
        "sim_busy_s": [round(s["busy_s"], 2) for s in stats],
        **work_share_figures(stats, speeds), **sim_lag(stats, time_scale),  # engine work, not requests; sim lateness
        # Sequence-seconds the engines ran (simulated): mean batch = seq_s / busy_s.
        "sim_seq_s": [round(s.get("seq_s", 0.0), 2) for s in stats],
        "preemptions": sum(s.get("preemptions", 0) for s in stats),
        "peak_open_requests": [s.get("peak_open_requests") for s in stats],
        # The most each replica's engine ran at once (10 Hz /metrics samples): requests held beyond it waited.
        "peak_running": [max((v.get("running", 0) for _, v in timeline.samples.get(s["base_url"], [])),
                             default=0) for s in stats],
        "requests": total,
        # Prompt tokens the replicas prefilled or took from their prefix cache (the fleet's count, every client).
        "header_tokens_prompt": sum(s["prompt_tokens"] for s in stats),
        # Share of those served from the replicas' own prefix caches (the model floor counts every
        # hit the corpus makes possible: `model_prefix_hit_tokens` over `model_prompt_tokens`).
        "prefix_hit_share": round(sum(s.get("prefix_hit_tokens", 0) for s in stats)
                                  / max(1, sum(s["prompt_tokens"] for s in stats)), 4),
    }
    # How far all clients together overshot what a replica ran: open requests over its peak batch.
    figures["overshoot"] = max((round(o / r - 1, 3) for o, r in zip(figures["peak_open_requests"],
                                                                       figures["peak_running"]) if o and r),
                               default=None)
    figures.update(idle_figures(timeline))
    return figures


def with_utilization(result: dict, time_scale: float) -> dict:
    """Fleet utilization over the whole wall: the engines' busy time (simulated seconds x the time
    scale) over replicas x wall; mean batch occupancy: mean running sequences while busy over
    max_num_seqs."""
    busy, seq = result.get("sim_busy_s"), result.get("sim_seq_s")
    if busy and result.get("wall_s"):
        result["utilization"] = round(sum(busy) * time_scale / (len(busy) * result["wall_s"]), 4)
        result["mean_batch"] = round(sum(seq) / sum(busy), 2) if seq and sum(busy) else None
        result["mean_batch_occupancy"] = (round(result["mean_batch"] / OPTIONS.max_num_seqs, 4)
                                          if result["mean_batch"] is not None else None)
    return result


def idle_figures(timeline) -> dict:
    """From 10 Hz /metrics samples: when the first and last request were admitted, and how idle the
    fleet was between them (see `idle_time`)."""
    moves: list[float] = []  # times at which some replica's prompt-token counter had moved
    for samples in timeline.samples.values():
        for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
            if v1.get("prompt_tokens", 0) > v0.get("prompt_tokens", 0):
                moves.append(t1)
    rows = timeline.per_second()
    if not moves:
        return {"first_request_t": None, "last_admission_t": None, "idle_while_pending_s": None,
                "pending_span_s": 0, "timeline": rows}
    first, last = min(moves), max(moves)
    return {"first_request_t": first, "last_admission_t": last, **idle_time(timeline, first, last),
            "timeline": rows}


def idle_time(timeline, start: float, end: float) -> dict:
    """`idle_while_pending_s`: fleet-seconds with nothing running between `start` (the first request
    admitted) and `end` (the last one): each sample interval counts the share of replicas whose
    running gauge read 0 at its start, so one idle replica of four for a second is 0.25 s. Work is
    pending all along this window (requests are still to come), so any idle replica is time the
    fleet lost; a second with an admission is not counted busy for it."""
    idle = 0.0
    replicas = len(timeline.samples) or 1
    for samples in timeline.samples.values():
        for (t0, v0), (t1, _) in zip(samples, samples[1:]):
            lo, hi = max(t0, start), min(t1, end)
            if hi > lo and v0.get("running", 0) <= 0:
                idle += hi - lo
    return {"idle_while_pending_s": round(idle / replicas, 2), "pending_span_s": round(end - start, 2)}


# ---- the corpus's requests and embedding time -------------------------------------------------

def corpus_chunks(paths: list[Path]):
    from contextual_assets.ingest.document_keys import partition_key_for
    from contextual_assets.ingest.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter
    from contextual_assets.settings import PlatformSettings

    # A workload's own context budget (kv-stress), else the platform's default.
    settings = PlatformSettings(**({"context_tokens": OPTIONS.context_tokens} if OPTIONS.context_tokens else {}))
    counter = token_counter()
    docs = [parse_document(partition_key_for(p.name), p, counter, chunk_tokens=settings.chunk_tokens,
                           max_bytes=10**9, max_pdf_pages=10**6) for p in paths]
    return docs, counter, settings


EMBED_SAMPLE = 1024  # chunks timed for `embed_seconds`; a larger corpus is scaled from an even sample


def embed_seconds(docs) -> float:
    """CPU embedding time of the corpus (header-sized text + chunk), model already loaded: timed over
    the whole corpus up to `EMBED_SAMPLE` chunks, else over an evenly spaced sample of that many and
    scaled by the chunk count (the stream's 5,814 chunks took ~4 min of both cores, a reference only)."""
    from contextual_assets.embedding import SentenceTransformerEmbedder, embedding_text

    embedder = SentenceTransformerEmbedder()
    embedder.embed(["warm up"])
    header = " ".join(["This passage covers the section's subject in the document named here."] * 3)
    texts = [embedding_text(header, c.text) for d in docs for c in d.chunks]
    sample = texts[::max(1, -(-len(texts) // EMBED_SAMPLE))]
    started = time.monotonic()
    for i in range(0, len(sample), 64):
        embedder.embed(sample[i: i + 64])
    return (time.monotonic() - started) * len(texts) / max(1, len(sample))


def header_fleet(base_urls: list[str]):
    from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.pool import HeaderFleet

    # The gauges' lag is the simulator's, as a user behind a caching exporter configures it.
    return HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=OPTIONS.cap) for u in base_urls],
                                   metrics_lag_s=OPTIONS.metrics_lag_s), discovery=ModelDiscovery())


def header_source(fleet, counter, store=None):
    from contextual_assets.headers.openai_source import OpenAIHeaderSource
    from contextual_assets.headers.prompt import DEFAULT_PROMPT, load_prompt

    return OpenAIHeaderSource(fleet, load_prompt(DEFAULT_PROMPT), counter,
                              header_cache=store.header_cache if store is not None else None)


def chunk_requests(doc, counter, settings, source, context_limit: int | None) -> list[tuple]:
    """(chunk, FleetRequest) for every chunk of a document, as the platform would send it."""
    from contextual_assets.headers.budget import fit_prompt
    from contextual_assets.headers.context import header_requests

    pairs = []
    for request in header_requests(doc, counter, settings.context_tokens):
        fitted = fit_prompt(request, source.prompt, counter, context_limit=context_limit,
                            max_output_tokens=source.max_output_tokens, safety=source.token_safety)
        pairs.append((request.chunk, source._single(request, fitted)))
    return pairs


def corpus_requests(docs, counter, settings, source, context_limit: int | None) -> list:
    """Every header request of the corpus, as the platform would send it (one chunk a request)."""
    return [request for doc in docs for _, request in chunk_requests(doc, counter, settings, source, context_limit)]


def request_body(request) -> dict:
    """The chat body the pool sends for a FleetRequest (model and temperature do not count)."""
    return {"messages": request.messages, "max_tokens": request.max_tokens, **(request.extra_body or {})}


def corpus_bodies(docs, counter, settings) -> tuple[list[dict], list[str]]:
    """The chat body of every header request of the corpus and its document, rendered without a fleet
    (the context limit is the simulator's)."""
    source = header_source(None, counter)
    pairs = [(doc.doc_id, request) for doc in docs
             for _, request in chunk_requests(doc, counter, settings, source, OPTIONS.sim_spec().max_model_len)]
    return [request_body(r) for _, r in pairs], [doc_id for doc_id, _ in pairs]


def model_floor(docs, counter, settings, time_scale: float, speeds: tuple[float, ...] = SPEEDS) -> dict:
    """`model_floor_s` and its totals (bench/model_floor.py): no fleet, no network. The cost model is one
    engine's, so each replica counts once per engine."""
    bodies, _ = corpus_bodies(docs, counter, settings)
    spec = OPTIONS.sim_spec()
    return floor_figures(bodies, engine_speeds(speeds, spec.engines), time_scale, CostModel.of(spec))


def fleet_work_per_process(docs, counter, settings, time_scale: float, speeds: tuple[float, ...]) -> list[float]:
    """shared-fleet: the model floor of each process's part (its folder) on the whole fleet."""
    parts = corpus_halves([Path(d.source_path) for d in docs])
    return [model_floor([d for d in docs if Path(d.source_path).parent == part], counter, settings, time_scale,
                        speeds)["model_floor_s"] for part in parts]


def oracle_figures(docs, counter, settings, time_scale: float, speeds: tuple[float, ...] = SPEEDS,
                   doc_arrivals: dict[str, float] | None = None) -> dict:
    """`oracle_floor_s` (bench/oracle_floor.py): the simulator's engines in simulated time, every request
    at once or at its document's arrival (`doc_arrivals`, wall seconds), split by the best oracle."""
    from bench.oracle_floor import oracle_floor

    bodies, documents = corpus_bodies(docs, counter, settings)
    arrivals = [doc_arrivals.get(d, 0.0) for d in documents] if doc_arrivals else None
    figures = oracle_floor(bodies, speeds, time_scale, OPTIONS.sim_spec(), documents=documents, arrivals=arrivals)
    return {k: round(v, 3) if isinstance(v, float) else
            [round(x, 3) for x in v] if isinstance(v, list) else
            {p: round(x, 3) for p, x in v.items()} if isinstance(v, dict) else v for k, v in figures.items()}


def with_model_floor(result: dict, floors: dict) -> dict:
    """A mode's result with the model floor and the oracle floor (`floors`), and its wall over each."""
    for name, ratio in (("model_floor_s", "wall_over_model_floor"), ("oracle_floor_s", "wall_over_oracle")):
        if floors.get(name):
            result[name] = floors[name]
            result[ratio] = round(result["wall_s"] / floors[name], 3)
    return result


def run_floor(workdir: Path, time_scale: float, docs, counter, settings, speeds: tuple[float, ...] = SPEEDS) -> dict:
    from contextual_assets.fleet.metrics_timeline import MetricsSampler

    sim = start_fleet(workdir, time_scale, speeds)
    fleet = header_fleet(sim.base_urls)
    try:
        source = header_source(fleet, counter)
        requests = corpus_requests(docs, counter, settings, source, fleet.context_limit)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started, cpu = time.monotonic(), time.process_time()
        results = fleet.run(requests)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        # This process's CPU is the client's (the simulator runs in its own), less the bench's sampler.
        client_cpu = time.process_time() - cpu - sampler.thread_cpu_s
        found = pool_limits(fleet)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise SystemExit(f"floor: {len(failed)} requests failed: {failed[0]}")
        figures = fleet_figures(sim, timeline, speeds, time_scale)
    finally:
        fleet.close()
        sim.stop()
    figures.pop("timeline")
    return {"wall_s": round(wall, 2), "client_cpu_ms_per_request": round(client_cpu * 1000 / max(1, len(requests)), 3),
            **found, **figures}


def pool_limits(fleet) -> dict:
    """The concurrency each replica's capacity search settled at (`limit_found`) and the most requests
    the pool had on it (`peak_in_flight`): what the client's CPU per request was measured at."""
    from contextual_assets.fleet.capacity import concurrency_limit

    return {"limit_found": [concurrency_limit(s) for s in fleet.replicas],
            "peak_in_flight": [s.peak_in_flight for s in fleet.replicas]}


def client_cpu_figure() -> float | None:
    """The header client's CPU per request, from the committed `bench.client_cpu` result (its own
    benchmark: CPU time is measured there with nothing else in the process)."""
    path = REPO_ROOT / "bench" / "results" / "client_cpu.json"
    try:
        return json.loads(path.read_text()).get("client_cpu_ms_per_request")
    except (OSError, ValueError):
        return None


def bench_store(path: Path, docs, source_identity: dict[str, str], embedder, settings):
    """A DuckDB store with the corpus's sources and one index version registered: (store, version)."""
    from contextual_assets.index_version import index_fingerprint, index_version_of
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    store = open_store(None, path)
    fingerprint = index_fingerprint(source_identity, embedder.identity, settings.chunk_tokens)
    version = index_version_of(fingerprint)
    store.corpus.register_index_version(version, fingerprint)
    for doc in docs:
        store.corpus.register_source(SourceRecord(doc_id=doc.doc_id, path=doc.source_path, file_hash=doc.file_hash))
    return store, version


def loaded_embedder():
    from contextual_assets.embedding import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    embedder.warm()
    return embedder


def run_legacy(workdir: Path, time_scale: float, docs, counter, settings, speeds: tuple[float, ...] = SPEEDS) -> dict:
    from contextual_assets.embedding import embed_chunks
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.headers.context import header_requests
    from contextual_assets.models import DocumentRecord, HeaderedChunk

    embed = EmbedServer(workdir, time_scale)
    embedder = embed.embedder()
    sim = start_fleet(workdir, time_scale, speeds)
    fleet = header_fleet(sim.base_urls)
    store = None
    try:
        store, version = bench_store(workdir / f"legacy-{time.monotonic_ns()}.duckdb", docs,
                                     header_source(fleet, counter).identity, embedder, settings)
        source = header_source(fleet, counter, store=store)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        for doc in docs:
            # The legacy loop: one document at a time, its headers, then its embedding and commit.
            results = source.generate(header_requests(doc, counter, settings.context_tokens))
            headered = [HeaderedChunk(**chunk.model_dump(), header=result.header, header_source=result.source,
                                      header_model=result.model) for chunk, result in zip(doc.chunks, results)]
            embedded = embed_chunks(headered, embedder)
            store.corpus.replace_document(DocumentRecord(
                doc_id=doc.doc_id, index_version=version, source_path=doc.source_path, kind=doc.kind, title=doc.title,
                file_hash=doc.file_hash, n_chunks=len(embedded), updated_at=""), embedded)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        chunks = store.corpus.count_chunks(version)
    finally:
        fleet.close()
        sim.stop()
        embed.stop()
        if store is not None:
            store.close()
    return {"wall_s": round(wall, 2), "chunks": chunks, **figures}


def run_peer(workdir: Path, time_scale: float, paths: list[Path], docs, counter, settings, name: str, prompt: str,
             speeds: tuple[float, ...] = SPEEDS, seed: int = 0, balancer: str = "random") -> dict:
    """A peer (bench/peers.py) from the files to its committed index, on a cold fleet of its own; the
    embedder is loaded beforehand (the platform loads its own inside its wall time). `seed` draws its
    random replicas (bench.ingest gives each round its own); `balancer`: `random` (LiteLLM's
    simple-shuffle) or `least_busy` (a least-outstanding-requests balancer in front of the fleet)."""
    from functools import partial

    from bench.peers import PEERS, PeerJob
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.metrics_timeline import MetricsSampler

    embed = EmbedServer(workdir, time_scale)
    embedder = embed.embedder()
    sim = start_fleet(workdir, time_scale, speeds)
    store = sampler = None
    try:
        # What a peer's user reads off /v1/models once and writes into their script.
        served = ModelDiscovery().resolve({url: None for url in sim.base_urls})
        model, context_limit = served.name, served.context_limit
        store, version = bench_store(workdir / f"{name}-{prompt}-{time.monotonic_ns()}.duckdb", docs,
                                     {"header_source": name, "header_model": model, "prompt_version": prompt},
                                     embedder, settings)
        job = PeerJob(paths=paths, base_urls=sim.base_urls, model=model, context_limit=context_limit,
                      workers=OPTIONS.peer_workers, prompt=prompt, counter=counter, settings=settings,
                      embedder=embedder, store=store, index_version=version, seed=seed, balancer=balancer,
                      ours_requests=partial(chunk_requests, counter=counter, settings=settings,
                                            source=header_source(None, counter), context_limit=context_limit))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        result = PEERS[name](job)
        wall = time.monotonic() - started
        figures = fleet_figures(sim, sampler.stop(), speeds, time_scale)
        committed = store.corpus.count_chunks(version)
    finally:
        if sampler is not None:
            sampler.stop()
        sim.stop()
        embed.stop()
        if store is not None:
            store.close()
    figures.pop("timeline")
    if committed != result.chunks:
        raise SystemExit(f"{name} ({prompt} prompts): {committed} chunks committed of {result.chunks}")
    return {"wall_s": round(wall, 2), "prompt": prompt, "balancer": balancer, **result.figures(), **figures}


def run_platform(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                 speeds: tuple[float, ...] = SPEEDS, timeout_s: float = 1800) -> dict:
    import dagster as dg

    from bench.sim.deployment import DagsterDeployment, deployment_env
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.ingest.document_keys import partition_key_for
    from contextual_assets.ingest.inbox import file_sha256
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    root = workdir / f"platform-{time.monotonic_ns()}"
    dagster_home = BenchDagsterHome(root / "dagster_home")
    home = dagster_home.home
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(root / "inbox"),
                         CTX_DUCKDB_PATH=str(duckdb_path), **fleet_settings(sim), **embed.env(), **dagster_home.env)
    keys = [partition_key_for(p.name) for p in paths]
    store = open_store(None, duckdb_path)
    for key, path in zip(keys, paths):
        store.corpus.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
    store.close()
    instance = dg.DagsterInstance.from_config(str(home))
    instance.add_dynamic_partitions("documents", keys)
    deployment = DagsterDeployment(root=root, env=env)
    sampler = None
    try:
        deployment.start_webserver()
        if OPTIONS.daemon_first:  # as a user meets it: the daemon has been running a while
            deployment.start_daemon()
            deployment.wait_daemons()
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        submitted = time.time()
        backfill_id = deployment.launch_backfill(keys, title=f"bench.ingest {len(keys)} documents")
        if not OPTIONS.daemon_first:
            # Started now, its first backfill iteration picks the backfill up at once (a running daemon's
            # backfill loop wakes every 30 s, Dagster's DEFAULT_DAEMON_INTERVAL_SECONDS: 0-30 s more).
            deployment.start_daemon()
        backfill = deployment.wait_backfill(backfill_id, timeout_s=timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        runs = backfill["runs"]
        launches, run_starts = [], []
        for run in runs:
            for record in instance.all_logs(run["runId"]):
                event = record.dagster_event
                if event is None:
                    continue
                if event.event_type == dg.DagsterEventType.RUN_STARTING:
                    launches.append(record.timestamp)
                elif event.event_type == dg.DagsterEventType.RUN_START:
                    run_starts.append(record.timestamp)
        commits = [record.timestamp for record in instance.fetch_materializations(
            dg.AssetKey("chunk_embeddings"), limit=10000).records]
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        events = event_counts(instance, [run["runId"] for run in runs], len(keys))
    finally:
        if sampler is not None:
            sampler.stop()
        deployment.stop_all()
        instance.dispose()
        dagster_home.stop()
        sim.stop()
        embed.stop()
    store = open_store(None, duckdb_path)
    try:
        chunks = store.corpus.count_chunks()
        documents = len(store.corpus.documents())
    finally:
        store.close()
    if backfill["status"] not in ("COMPLETED", "COMPLETED_SUCCESS") or len(materialized) != len(keys):
        raise SystemExit(f"platform backfill {backfill['status']}: {len(materialized)} of {len(keys)} partitions\n"
                         f"{deployment.logs()[-5000:]}")
    first_launch, last_commit = min(launches), max(commits)
    # Sampler times are monotonic; map the first request onto the wall clock of the event log.
    offset = time.time() - time.monotonic()
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    return {
        # From the backfill's submission (what the user waits for), as the peers are timed.
        "wall_s": round(last_commit - submitted, 2),
        "launch_to_commit_s": round(last_commit - first_launch, 2),
        "submit_to_launch_s": round(first_launch - submitted, 2),
        "startup_s": round(first_request - first_launch, 2) if first_request else None,
        "submit_to_first_request_s": first_request_after(first_request, submitted),
        "run_start_s": round(min(run_starts) - first_launch, 2) if run_starts else None,
        "tail_s": round(last_commit - (figures["last_admission_t"] + offset), 2),
        "runs": len(runs),
        **events, "cpu_ms_per_event": CPU_MS_PER_EVENT.get(OPTIONS.dagster_storage),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        **figures,
    }


def fleet_settings(sim: SimFleet) -> dict[str, str]:
    """The platform's settings for the simulated fleet (and CTX_PARTITIONS_PER_RUN when given)."""
    return {"CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": ",".join(sim.base_urls),
            "CTX_LLM_MAX_IN_FLIGHT": str(OPTIONS.cap or 0),
            **({"CTX_CONTEXT_TOKENS": str(OPTIONS.context_tokens)} if OPTIONS.context_tokens else {}),
            **{k: v for k, v in os.environ.items() if k == "CTX_PARTITIONS_PER_RUN"}}


# ---- stream: the inbox sensor of a real daemon, files arriving in waves -----------------------------

START_SENSOR = """
mutation ($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status } }
    ... on Error { message }
  }
}
"""
# workspace.yaml's code location, and Dagster's name for the repository of a module's Definitions.
SENSOR_SELECTOR = {"repositoryLocationName": "contextual_retrieval", "repositoryName": "__repository__",
                   "sensorName": "new_documents"}


def start_sensor(deployment) -> None:
    """The UI's sensor toggle: the `startSensor` mutation."""
    started = deployment.graphql(START_SENSOR, {"selector": SENSOR_SELECTOR})["startSensor"]
    if started["__typename"] != "Sensor" or started["sensorState"]["status"] != "RUNNING":
        raise SystemExit(f"new_documents sensor not started: {started}")


def wave_batches(paths: list[Path], waves: int) -> list[list[Path]]:
    """`paths` in order, cut into `waves` batches of (nearly) equal size."""
    waves = max(1, min(waves, len(paths)))
    bounds = [round(i * len(paths) / waves) for i in range(waves + 1)]
    return [paths[a:b] for a, b in itertools.pairwise(bounds)]


def drop_files(batch: list[Path], inbox: Path) -> None:
    """Copy under a hidden name (the sensor skips those), then rename: no half-written file is listed."""
    import shutil

    for path in batch:
        partial = inbox / f".{path.name}.part"
        shutil.copyfile(path, partial)
        os.replace(partial, inbox / path.name)


def feed_inbox(instance, deployment, batches: list[list[Path]], inbox: Path, interval_s: float,
               timeout_s: float) -> list[float]:
    """Drops batch i at i * interval_s, then waits until every file's partition of chunk_embeddings
    is materialized. Returns the wall-clock time of each drop. A failed run ends the bench (the
    sensor's retries would hide it)."""
    import dagster as dg

    expected = sum(len(b) for b in batches)
    start = time.monotonic()
    deadline = start + timeout_s
    dropped: list[float] = []
    while True:
        now = time.monotonic()
        while len(dropped) < len(batches) and now >= start + len(dropped) * interval_s:
            drop_files(batches[len(dropped)], inbox)
            dropped.append(time.time())
        if len(dropped) == len(batches) and \
                len(instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))) >= expected:
            return dropped
        for name, proc, _ in deployment.processes:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}\n{deployment.logs()[-5000:]}")
        failed = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=1)
        if failed:
            raise SystemExit(f"stream: run {failed[0].dagster_run.run_id} failed\n{deployment.logs()[-5000:]}")
        if now > deadline:
            raise SystemExit(f"stream: not every document committed after {timeout_s} s\n{deployment.logs()[-5000:]}")
        time.sleep(1.0)


def commit_times(instance) -> dict[str, list[float]]:
    """Run id -> wall-clock times of its chunk_embeddings materializations (one per document)."""
    import dagster as dg

    found: dict[str, list[float]] = {}
    records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey("chunk_embeddings"))
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=1000, cursor=cursor)
        for record in page.records:
            found.setdefault(record.run_id, []).append(record.timestamp)
        if not page.has_more:
            return found
        cursor = page.cursor


def sensor_runs(instance) -> list[dict]:
    """The runs the sensor requested, in creation order: size, created, launched (its process
    started), started (the run began), first and last commit; wall-clock seconds."""
    import dagster as dg

    commits = commit_times(instance)
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"ctx/trigger": "inbox"}),
                                       order_by="create_timestamp", ascending=True)
    runs = []
    for record in records:
        run = record.dagster_run
        events = {}
        for entry in instance.all_logs(run.run_id, of_type={dg.DagsterEventType.RUN_STARTING,
                                                              dg.DagsterEventType.RUN_START}):
            events.setdefault(entry.dagster_event.event_type, entry.timestamp)
        times = commits.get(run.run_id, [])
        runs.append({"run_id": run.run_id, "documents": int(run.tags.get("ctx/documents", "1")),
                     "created": record.create_timestamp.timestamp(),
                     "launched": events.get(dg.DagsterEventType.RUN_STARTING),
                     "started": events.get(dg.DagsterEventType.RUN_START),
                     "first_commit": min(times) if times else None, "last_commit": max(times) if times else None,
                     "commits": len(times)})
    return runs


def run_boundaries(spans: list[tuple[float, float]], timeline, offset: float, t0: float) -> list[dict]:
    """For consecutive runs (`spans`: each run's first and last commit, wall clock): the gap from one
    run's last commit to the next run's first, and the fleet's idle time inside it (`idle_time`;
    `offset` maps the timeline's monotonic clock onto the wall clock). `after_s`: the gap's start
    from t0."""
    out = []
    for (_, last), (first, _) in itertools.pairwise(sorted(spans)):
        idle = idle_time(timeline, last - offset, first - offset)["idle_while_pending_s"] if first > last else 0.0
        out.append({"after_s": round(last - t0, 2), "gap_s": round(first - last, 2), "idle_while_pending_s": idle})
    return out


def run_stream(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
               speeds: tuple[float, ...] = SPEEDS, waves: int = 8, wave_interval_s: float = 10.0,
               settle_s: float = 1.0, timeout_s: float = 3600) -> dict:
    """The corpus dropped into the inbox in `waves` waves, `wave_interval_s` apart, with webserver
    and daemon running and the `new_documents` sensor turned on as the UI does it; until every
    document is committed. wall_s: from the first run's launch to the last commit."""
    import dagster as dg

    from bench.sim.deployment import DagsterDeployment, deployment_env
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.store import open_store

    root = workdir / f"stream-{time.monotonic_ns()}"
    dagster_home = BenchDagsterHome(root / "dagster_home")
    home = dagster_home.home
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(inbox), CTX_INBOX_SETTLE_S=str(settle_s),
                         CTX_DUCKDB_PATH=str(duckdb_path), **fleet_settings(sim), **embed.env(),
                         **dagster_home.env)
    instance = dg.DagsterInstance.from_config(str(home))
    deployment = DagsterDeployment(root=root, env=env)
    sampler = None
    try:
        deployment.start_webserver()
        start_sensor(deployment)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        deployment.start_daemon()
        drops = feed_inbox(instance, deployment, wave_batches(paths, waves), inbox, wave_interval_s, timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        runs = sensor_runs(instance)
        events = event_counts(instance, [r["run_id"] for r in runs], len(paths))
    finally:
        if sampler is not None:
            sampler.stop()
        deployment.stop_all()
        instance.dispose()
        dagster_home.stop()
        sim.stop()
        embed.stop()
    store = open_store(None, duckdb_path)
    try:
        chunks, documents = store.corpus.count_chunks(), len(store.corpus.documents())
    finally:
        store.close()
    first_launch = min(r["launched"] for r in runs if r["launched"] is not None)
    last_commit = max(r["last_commit"] for r in runs if r["last_commit"] is not None)
    offset = time.time() - time.monotonic()  # sampler times are monotonic; event-log times wall-clock
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    boundaries = run_boundaries([(r["first_commit"], r["last_commit"]) for r in runs if r["commits"]],
                                timeline, offset, first_launch)

    def rel(t: float | None) -> float | None:
        return round(t - first_launch, 2) if t is not None else None

    return {
        # From the first drop into the inbox (the user's submission) to the last commit.
        "wall_s": round(last_commit - drops[0], 2),
        "launch_to_commit_s": round(last_commit - first_launch, 2),
        "submit_to_launch_s": round(first_launch - drops[0], 2),
        "startup_s": round(first_request - first_launch, 2) if first_request else None,
        # From the first drop (the sensor's interval and settle time included), and from the first run's
        # creation (the tick's run request) to the fleet's first request.
        "submit_to_first_request_s": first_request_after(first_request, drops[0]),
        "request_to_first_request_s": first_request_after(first_request, min(r["created"] for r in runs)),
        "run_start_s": rel(min((r["started"] for r in runs if r["started"] is not None), default=None)),
        **events, "cpu_ms_per_event": CPU_MS_PER_EVENT.get(OPTIONS.dagster_storage),
        "tail_s": round(last_commit - (figures["last_admission_t"] + offset), 2),
        "runs": len(runs),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        "waves": len(drops), "wave_interval_s": wave_interval_s, "drops_s": [rel(t) for t in drops],
        "run_sizes": [r["documents"] for r in runs],
        "run_timeline": [{"documents": r["documents"], "created_s": rel(r["created"]), "launched_s": rel(r["launched"]),
                          "started_s": rel(r["started"]), "first_commit_s": rel(r["first_commit"]),
                          "last_commit_s": rel(r["last_commit"])} for r in runs],
        "run_boundaries": boundaries,
        "boundary_gap_s": round(sum(max(0.0, b["gap_s"]) for b in boundaries), 2),
        "boundary_idle_s": sum(b["idle_while_pending_s"] for b in boundaries),
        **figures,
    }


# ---- shared-fleet: two `ctx ingest` processes on one fleet, Postgres store -------------------------

def start_postgres():
    """A pgserver Postgres with pgvector and a fresh database, as bench/faults.py gets one:
    (server, database URL, data folder)."""
    import uuid

    import pgserver

    # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
    data = Path(tempfile.mkdtemp(prefix="bench-ingest-pg-"))
    server = pgserver.get_server(data, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    name = f"ingest_{uuid.uuid4().hex[:12]}"
    server.psql(f"CREATE DATABASE {name};")
    return server, server.get_uri().replace("/postgres?", f"/{name}?", 1), data


class BenchDagsterHome:
    """The bench's DAGSTER_HOME: the shipped dagster.yaml (SQLite under the home), or with
    `--dagster-storage postgres` deploy/dagster.postgres.yaml on a pgserver Postgres of its own, as a
    deployment runs it (run and event-log storage in Postgres; the bench process reads it too)."""

    def __init__(self, home: Path):
        from bench.sim.deployment import seed_dagster_home

        self.server = None
        self.env: dict[str, str] = {}
        if OPTIONS.dagster_storage == "postgres":
            self.server, url, self.data = start_postgres()
            # dagster-postgres is written for psycopg2 (see deploy/dagster.postgres.yaml).
            self.env["DAGSTER_PG_URL"] = url.replace("postgresql://", "postgresql+psycopg2://", 1)
            os.environ.update(self.env)
        self.home = seed_dagster_home(home, ingest_slots=OPTIONS.ingest_slots, postgres=self.server is not None)

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            shutil.rmtree(self.data, ignore_errors=True)


def corpus_halves(paths: list[Path]) -> list[Path]:
    """The folders holding the corpus (a/ and b/ for shared-fleet), one `ctx ingest` each."""
    return sorted({p.parent for p in paths})


def wait_processes(procs: list, timeout_s: float) -> list[float]:
    """Wall-clock exit time of each process; all are killed (their groups) past the timeout."""
    import signal

    ends: list[float | None] = [None] * len(procs)
    deadline = time.monotonic() + timeout_s
    while any(e is None for e in ends):
        for i, proc in enumerate(procs):
            if ends[i] is None and proc.poll() is not None:
                ends[i] = time.time()
        if time.monotonic() > deadline:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            raise SystemExit(f"shared-fleet: ingest still running after {timeout_s} s")
        time.sleep(0.1)
    return [e for e in ends if e is not None]


def run_shared_fleet(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                     speeds: tuple[float, ...] = WORKLOAD_SPEEDS["shared-fleet"], timeout_s: float = 1800) -> dict:
    """One `ctx ingest --json FOLDER` per half of the corpus, started together, each with its own
    CTX_HOME and DAGSTER_HOME (two machines) and one Postgres store, on one fleet. Each process caps
    its own requests at CAP per replica; the simulator counts what all of them have open."""
    import shutil
    import signal
    import subprocess

    import dagster as dg

    from bench.sim.deployment import deployment_env, seed_dagster_home
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.store import open_store

    root = workdir / f"shared-{time.monotonic_ns()}"
    folders = corpus_halves(paths)
    source_root = Path(os.path.commonpath([str(f) for f in folders])) if len(folders) > 1 else folders[0].parent
    server, url, pg_dir = start_postgres()
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    procs, logs, sampler = [], [], None
    try:
        open_store(url, root / "unused.duckdb").close()  # schema migrated once, before the clock starts
        envs = []
        for i in range(len(folders)):
            home = seed_dagster_home(root / f"p{i}" / "dagster_home")
            dg.DagsterInstance.from_config(str(home)).dispose()  # its storage created before the clock too
            envs.append(deployment_env(home, CTX_HOME=str(root / f"p{i}" / ".ctx"), CTX_INBOX=str(root / "inbox"),
                                       CTX_SOURCE_ROOT=str(source_root), DATABASE_URL=url, **fleet_settings(sim),
                                       **embed.env()))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.time()
        for i, (folder, env) in enumerate(zip(folders, envs)):
            out, err = root / f"p{i}" / "stdout.json", root / f"p{i}" / "stderr.log"
            logs.append((out, err))
            with out.open("wb") as stdout, err.open("wb") as stderr:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "contextual_assets.app.cli", "ingest", "--json", str(folder)],
                    cwd=REPO_ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True))
        ends = wait_processes(procs, timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        store = open_store(url, root / "unused.duckdb")
        try:
            chunks, documents = store.corpus.count_chunks(), len(store.corpus.documents())
        finally:
            store.close()
    finally:
        if sampler is not None:
            sampler.stop()
        for proc in procs:
            if proc.poll() is None:  # only after an error: a finished bench waited for them
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        sim.stop()
        embed.stop()
        server.cleanup()
        shutil.rmtree(pg_dir, ignore_errors=True)
    outcomes = []
    for proc, (out, err) in zip(procs, logs):
        try:
            outcomes.append(json.loads(out.read_text() or "[]"))
        except json.JSONDecodeError:
            outcomes.append([])
        if proc.returncode != 0 or not all(o["success"] for o in outcomes[-1]):
            raise SystemExit(f"shared-fleet: ctx ingest rc {proc.returncode}\n{err.read_text()[-3000:]}")
    offset = time.time() - time.monotonic()
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    peaks = figures["peak_open_requests"]
    return {
        "wall_s": round(max(ends) - started, 2),
        "process_wall_s": [round(e - started, 2) for e in ends],
        "process_documents": [len(o) for o in outcomes],
        "startup_s": round(first_request - started, 2) if first_request else None,
        "tail_s": round(max(ends) - (figures["last_admission_t"] + offset), 2),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        "speeds": list(speeds),
        "cap": OPTIONS.cap,
        "peak_over_cap": None if None in peaks or OPTIONS.cap is None else any(p > OPTIONS.cap for p in peaks),
        **figures,
    }


PLATFORM_RUNS = {"stream": run_stream, "shared-fleet": run_shared_fleet}  # others: run_platform


def run_sensor_tick(workdir: Path, paths: list[Path]) -> dict:
    """One `new_documents` tick over an inbox holding the corpus (every file new), as the daemon
    evaluates it: how long the tick takes and how many runs it requests."""
    import shutil

    import dagster as dg

    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.settings import PlatformSettings

    root = workdir / f"sensor-{time.monotonic_ns()}"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    for path in paths:
        shutil.copyfile(path, inbox / path.name)
    # Settle 0: the files were copied just now and the tick is timed at once.
    settings = PlatformSettings(home=str(root), inbox=str(inbox), duckdb_path=str(root / "index.duckdb"),
                                header_source="structural", inbox_settle_s=0)
    defs = build_definitions(settings)
    sensor = defs.resolve_sensor_def("new_documents")
    (root / "dagster_home").mkdir()
    instance = dg.DagsterInstance.local_temp(str(root / "dagster_home"))
    try:
        started = time.monotonic()
        with dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=None, definitions=defs,
                                     resources={"store": build_resources(settings)["store"]}) as context:
            data = sensor.evaluate_tick(context)
        tick_s = time.monotonic() - started
    finally:
        instance.dispose()
    return {"documents": len(paths), "tick_s": round(tick_s, 2), "run_requests": len(data.run_requests)}


# ---- driver --------------------------------------------------------------------------------------

def one_round(workdir: Path, time_scale: float, paths, docs, counter, settings, modes: list[str],
              workload: str = "seed", floors: dict | None = None, platform_options: dict | None = None,
              round_index: int = 0) -> dict:
    expected = sum(len(d.chunks) for d in docs)
    speeds = workload_speeds(workload)
    out: dict = {}
    if "floor" in modes:
        out["floor"] = run_floor(workdir, time_scale, docs, counter, settings, speeds)
    if "platform" in modes:
        run = PLATFORM_RUNS.get(workload, run_platform)
        out["platform"] = run(workdir, time_scale, paths, expected, speeds=speeds, **(platform_options or {}))
    if "legacy" in modes:
        out["legacy"] = run_legacy(workdir, time_scale, docs, counter, settings, speeds)
    for name, prompt in peer_runs(modes):
        for balancer in BALANCERS_RUN:
            out[f"{name}/{prompt}/{balancer}"] = run_peer(workdir, time_scale, paths, docs, counter, settings, name,
                                                          prompt, speeds, seed=round_index, balancer=balancer)
    for result in out.values():
        with_sim_validity(with_utilization(result, time_scale))
        if floors is not None:
            with_model_floor(result, floors)
    return out


BALANCERS_RUN: tuple[str, ...] = ("random", "least_busy")  # --balancers


PEER_MODES = ("peer_llamaindex", "peer_cookbook")
BASE_MODES = ("floor", "platform", "legacy")


def peer_runs(modes: list[str]) -> list[tuple[str, str]]:
    """(peer, prompt) pairs of the modes: `peer_x` runs both prompts, `peer_x:own` or `peer_x:ours` one."""
    runs = []
    for mode in modes:
        name, _, prompt = mode.partition(":")
        if name in PEER_MODES:
            runs += [(name, p) for p in (("own", "ours") if not prompt else (prompt,))]
    return runs


def check_modes(modes: list[str]) -> str | None:
    """None, or the one-line complaint about the first mode --modes does not know."""
    for mode in modes:
        name, _, prompt = mode.partition(":")
        if not (mode in BASE_MODES or (name in PEER_MODES and prompt in ("", "own", "ours"))):
            return (f"--modes: unknown mode {mode!r}; use {', '.join(BASE_MODES + PEER_MODES)} "
                    f"(a peer alone with one prompt: peer_cookbook:own or peer_cookbook:ours)")
    return None


def median_interval(values: list[float], confidence: float = 0.95, resamples: int = 10_000,
                    seed: int = 0) -> tuple[float, float] | tuple[None, None]:
    """A percentile-bootstrap interval of the median (None, None with fewer than two values)."""
    import random

    if len(values) < 2:
        return None, None
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


def peer_rows(rounds: list[dict]) -> list[dict]:
    """Per peer, prompt and balancer, medians over the rounds; `over_platform` is the median of each
    round's peer wall over that round's platform wall (both timed from submission; None without a
    platform run), with a 95 % bootstrap interval."""
    keys = list(dict.fromkeys(k for r in rounds for k in r if "/" in k))
    rows = []
    for key in keys:
        name, prompt, balancer = key.split("/")
        runs = [r for r in rounds if key in r]

        def median(field: str, runs=runs, key=key):
            values = [r[key][field] for r in runs if r[key].get(field) is not None]
            return round(statistics.median(values), 3) if values else None

        over = [r[key]["wall_s"] / r["platform"]["wall_s"] for r in runs if "platform" in r]
        idle = [r[key]["idle_while_pending_s"] / r[key]["wall_s"] for r in runs
                if r[key].get("idle_while_pending_s") is not None]
        low, high = median_interval(over)
        rows.append({"name": name, "prompt": prompt, "balancer": balancer, "wall_s": median("wall_s"),
                     "over_platform": round(statistics.median(over), 3) if over else None,
                     "ci_low": round(low, 3) if low is not None else None,
                     "ci_high": round(high, 3) if high is not None else None,
                     "header_tokens_prompt": median("header_tokens_prompt"),
                     "idle_while_pending_s": median("idle_while_pending_s"),
                     "idle_share": round(statistics.median(idle), 4) if idle else None,
                     "headers_s": median("headers_s"), "embed_s": median("embed_s"),
                     "headers_missing": max(r[key]["headers_missing"] for r in runs), "rounds": len(runs)})
    return rows


def summarize(rounds: list[dict]) -> dict:
    def median(mode: str, field: str):
        values = [r[mode][field] for r in rounds if mode in r and r[mode].get(field) is not None]
        return round(statistics.median(values), 3) if values else None

    summary = {
        "floor_s": median("floor", "wall_s"),
        "wall_s": median("platform", "wall_s"),
        "legacy_wall_s": median("legacy", "wall_s"),
        "idle_while_pending_s": median("platform", "idle_while_pending_s"),
        "prompt_counter_still_s": median("platform", "prompt_counter_still_s"),
        "floor_prompt_counter_still_s": median("floor", "prompt_counter_still_s"),
        "legacy_idle_while_pending_s": median("legacy", "idle_while_pending_s"),
        "startup_s": median("platform", "startup_s"),
        "submit_to_launch_s": median("platform", "submit_to_launch_s"),
        "tail_s": median("platform", "tail_s"),
        "header_tokens_prompt": median("platform", "header_tokens_prompt"),
        "utilization": median("platform", "utilization"),
        "mean_batch": median("platform", "mean_batch"),
        "mean_batch_occupancy": median("platform", "mean_batch_occupancy"),
        "preemptions": median("platform", "preemptions"),
        "launch_to_commit_s": median("platform", "launch_to_commit_s"),
        "submit_to_first_request_s": median("platform", "submit_to_first_request_s"),
        "request_to_first_request_s": median("platform", "request_to_first_request_s"),
        "events_per_document": median("platform", "events_per_document"),
        "planned_events_per_run_max": median("platform", "planned_events_per_run_max"),
        "cpu_ms_per_event": median("platform", "cpu_ms_per_event"),
        "oracle_floor_s": next((r[m]["oracle_floor_s"] for r in rounds for m in r if "oracle_floor_s" in r[m]), None),
        # The pool alone: the client's CPU per request at the limits it found, its preemptions.
        "floor_client_cpu_ms_per_request": median("floor", "client_cpu_ms_per_request"),
        "floor_preemptions": median("floor", "preemptions"),
        "floor_limits_found": [r["floor"].get("limit_found") for r in rounds if "floor" in r],
    }
    summary["model_floor_s"] = next((r[m]["model_floor_s"] for r in rounds for m in r if "model_floor_s" in r[m]),
                                    None)
    ratios = {"wall_over_floor": [], "wall_over_model_floor": [], "floor_over_model_floor": [],
              "legacy_over_platform": [], "idle_share": [], "launch_to_commit_over_model_floor": [],
              "platform_minus_floor_s": [], "wall_over_oracle": [], "floor_over_oracle": []}
    for r in rounds:
        if "platform" in r and "floor" in r:
            ratios["wall_over_floor"].append(r["platform"]["wall_s"] / r["floor"]["wall_s"])
            # What the platform adds to the pool alone in the same round (the issue's 2.5 s budget).
            ratios["platform_minus_floor_s"].append(r["platform"]["wall_s"] - r["floor"]["wall_s"])
        for mode, ratio in (("platform", "wall_over_oracle"), ("floor", "floor_over_oracle")):
            if r.get(mode, {}).get("wall_over_oracle") is not None:
                ratios[ratio].append(r[mode]["wall_over_oracle"])
        for mode, ratio in (("platform", "wall_over_model_floor"), ("floor", "floor_over_model_floor")):
            if r.get(mode, {}).get("wall_over_model_floor") is not None:
                ratios[ratio].append(r[mode]["wall_over_model_floor"])
        if "platform" in r and "legacy" in r:
            ratios["legacy_over_platform"].append(r["legacy"]["wall_s"] / r["platform"]["wall_s"])
        if "platform" in r and r["platform"].get("idle_while_pending_s") is not None:
            ratios["idle_share"].append(r["platform"]["idle_while_pending_s"] / r["platform"]["wall_s"])
        if r.get("platform", {}).get("launch_to_commit_s") and r["platform"].get("model_floor_s"):
            ratios["launch_to_commit_over_model_floor"].append(
                r["platform"]["launch_to_commit_s"] / r["platform"]["model_floor_s"])
    for name, values in ratios.items():
        summary[name] = round(statistics.median(values), 3) if values else None
    summary["idle_while_pending_share"] = summary["idle_share"]  # the issue's name for the same figure
    last = rounds[-1].get("platform", {})
    chunks = next((r[m]["chunks"] for r in rounds for m in r if r[m].get("chunks") is not None), None)
    summary.update({"replica_share": last.get("replica_share"), "capacity_share": last.get("capacity_share"),
                    # The platform's (the headline's), and the floor's apart: every request at once through
                    # the pool is a diagnostic; a peer's own draws are in its round entry.
                    "share_max_relative_error": max_share_error(rounds, "platform"),
                    "floor_share_max_relative_error": max_share_error(rounds, "floor"),
                    "work_share_error": max_share_error(rounds, "platform", "work_share_error"),
                    "chunks": last.get("chunks", chunks), "runs_per_backfill": last.get("runs"),
                    "timeline": last.get("timeline")})
    # The stream's and the shared fleet's own figures, from the last round.
    summary.update({k: last[k] for k in WORKLOAD_FIGURES if k in last})
    summary["peers"] = peer_rows(rounds)
    summary.update(validity_summary(rounds))  # invalid_rounds: the simulator fell behind (bench/sim_validity.py)
    return summary


def max_share_error(rounds: list[dict], mode: str, field: str = "share_max_relative_error") -> float | None:
    """The largest relative gap between a replica's share of requests (or `field`) and its capacity
    share, over the rounds of one mode."""
    return max((r[mode][field] for r in rounds if r.get(mode, {}).get(field) is not None), default=None)


WORKLOAD_FIGURES = ("run_sizes", "run_boundaries", "boundary_gap_s", "boundary_idle_s", "peak_open_requests",
                    "peak_running", "overshoot", "peak_over_cap", "process_wall_s")


def print_table(workload: str, time_scale: float, embed_s: float | None, rounds: list[dict], summary: dict) -> None:
    embedding = "not timed" if embed_s is None else f"{embed_s:.1f} s on this CPU"
    print(f"workload {workload}: {summary['chunks']} chunks; embedding {embedding}; "
          f"fleet time scale {time_scale}")
    nan = float("nan")
    print(f"{'round':>5s} {'model s':>8s} {'floor s':>8s} {'platform s':>11s} {'legacy s':>9s} {'wall/floor':>11s} "
          f"{'wall/model':>11s} {'legacy/plat':>12s} {'idle s':>7s} {'startup s':>10s} {'tail s':>7s} "
          f"{'share err':>10s}")
    for i, r in enumerate(rounds, 1):
        f, p, lg = r.get("floor", {}), r.get("platform", {}), r.get("legacy", {})
        ratio = p["wall_s"] / f["wall_s"] if p and f else nan
        lratio = lg["wall_s"] / p["wall_s"] if p and lg else nan
        model = next((x["model_floor_s"] for x in r.values() if x.get("model_floor_s")), None)
        print(f"{i:5d} {model or nan:8.2f} {f.get('wall_s', nan):8.2f} {p.get('wall_s', nan):11.2f} "
              f"{lg.get('wall_s', nan):9.2f} {ratio:11.3f} {p.get('wall_over_model_floor') or nan:11.3f} "
              f"{lratio:12.3f} {p.get('idle_while_pending_s') or 0:7.1f} {p.get('startup_s') or nan:10.2f} "
              f"{p.get('tail_s') or nan:7.2f} "
              f"{max((x['share_max_relative_error'] for m, x in r.items() if '/' not in m), default=nan):10.3f}"
              f"{lag_flag(r)}")
    print(f"oracle floor {summary['oracle_floor_s']} s: wall/oracle {summary['wall_over_oracle']}, floor/oracle "
          f"{summary['floor_over_oracle']}; platform - floor {summary['platform_minus_floor_s']} s; submission to "
          f"first request {summary['submit_to_first_request_s']} s; events per document "
          f"{summary['events_per_document']}, planned events per run (max) {summary['planned_events_per_run_max']}")
    print(f"median: wall/floor {summary['wall_over_floor']}, wall/model floor {summary['wall_over_model_floor']} "
          f"(floor/model floor {summary['floor_over_model_floor']}), legacy/platform "
          f"{summary['legacy_over_platform']}, idle while pending {summary['idle_while_pending_s']} s "
          f"({summary['idle_share']} of wall), startup {summary['startup_s']} s, "
          f"daemon pick-up {summary['submit_to_launch_s']} s; utilization {summary['utilization']}, mean batch "
          f"{summary['mean_batch']} ({summary['mean_batch_occupancy']} of max_num_seqs), preemptions "
          f"{summary['preemptions']}; simulator lag {summary['sim_max_lag_s']} s, invalid rounds "
          f"{summary['invalid_rounds']}")
    if summary["peers"]:
        print_peers(summary)
    if "run_boundaries" in summary:
        print(f"stream: runs of {summary['run_sizes']} documents; between runs {summary['boundary_gap_s']} s "
              f"without a commit, {summary['boundary_idle_s']} s of them idle while pending")
    if "peak_open_requests" in summary and "process_wall_s" in summary:
        print(f"shared fleet: processes {summary['process_wall_s']} s; peak open requests per replica "
              f"{summary['peak_open_requests']} (cap {OPTIONS.cap}); shares {summary['replica_share']} vs capacity "
              f"{summary['capacity_share']}; work share error {summary['work_share_error']}")


def print_peers(summary: dict) -> None:
    """The peers under the platform, medians over the rounds."""
    print(f"{'':16s} {'prompt':>6s} {'balancer':>10s} {'wall s':>8s} {'over platform':>14s} {'95% CI':>14s} "
          f"{'prompt tokens':>14s} {'idle s':>7s} {'idle share':>11s} {'missing':>8s}")
    rows = [{"name": "platform", "prompt": "ours", "balancer": "pool", "wall_s": summary["wall_s"],
             "over_platform": 1.0 if summary["wall_s"] else None, "ci_low": None, "ci_high": None,
             "header_tokens_prompt": summary["header_tokens_prompt"],
        "idle_while_pending_s": summary["idle_while_pending_s"], "idle_share": summary["idle_share"],
        "headers_missing": None}] + summary["peers"]
    def cell(value, width: int, fmt: str) -> str:
        return ("-" if value is None else format(value, fmt)).rjust(width)

    for row in rows:
        interval = (f"{row['ci_low']:.2f}-{row['ci_high']:.2f}" if row.get("ci_low") is not None else "-").rjust(14)
        print(f"{row['name']:16s} {row['prompt']:>6s} {row['balancer']:>10s} {cell(row['wall_s'], 8, '.2f')} "
              f"{cell(row['over_platform'], 14, '.3f')} {interval} {cell(row['header_tokens_prompt'], 14, ',.0f')} "
              f"{cell(row['idle_while_pending_s'], 7, '.1f')} {cell(row['idle_share'], 11, '.3f')} "
              f"{cell(row['headers_missing'], 8, 'd')}")


def parse_scales(text: str) -> list[float]:
    scales = [float(x) for x in text.split(",") if x.strip()]
    if not scales or any(x <= 0 for x in scales):
        raise ValueError("time scales must be positive numbers, e.g. 0.5,1,2,4,8")
    return scales


def run_scale(workdir: Path, time_scale: float, paths, docs, counter, settings, modes: list[str], workload: str,
              runs: int, waves: int, wave_interval: float | None) -> dict:
    """Every round of every mode at one time scale: the rounds and their summary."""
    speeds = workload_speeds(workload)
    model = model_floor(docs, counter, settings, time_scale, speeds)
    options, arrivals = {}, None
    if workload == "stream":
        # Files arrive twice as fast as the fleet could serve them: it never waits for the inbox.
        interval = wave_interval if wave_interval is not None else \
            round(max(1.0, model["model_floor_s"] / 2 / max(1, waves - 1)), 2)
        options = {"waves": waves, "wave_interval_s": interval}
        # The oracle gets each file when its wave is dropped (docs are in the paths' order).
        arrivals = {doc.doc_id: k * interval
                    for k, batch in enumerate(wave_batches(list(docs), waves)) for doc in batch}
    if workload == "shared-fleet":  # enough work per process for the shares to settle (>= 30 s wanted)
        model["fleet_work_s_per_process"] = fleet_work_per_process(docs, counter, settings, time_scale, speeds)
        print(f"fleet work per process (model floor): {model['fleet_work_s_per_process']} s", flush=True)
    model.update(oracle_figures(docs, counter, settings, time_scale, speeds, arrivals))
    rounds = []
    for i in range(runs):
        rounds.append(one_round(workdir, time_scale, paths, docs, counter, settings, modes, workload,
                                model, options, round_index=i))
        print(f"time scale {time_scale}, round {i + 1}: "
              + ", ".join(f"{m} {r['wall_s']} s" for m, r in rounds[-1].items()), flush=True)
    return {"time_scale": time_scale, **model, "rounds": rounds, **summarize(rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="seed")
    parser.add_argument("--runs", type=int, default=1, help="rounds of every mode; medians are reported")
    parser.add_argument("--modes", default="floor,platform,legacy")
    parser.add_argument("--time-scale", type=float, default=None,
                        help="the fleet's time scale: real seconds per simulated second (default 1: the modelled GPU)")
    parser.add_argument("--time-scales", default=None,
                        help="sweep: comma-separated time scales, e.g. 0.5,1,2,4,8 (the headline is the worst)")
    parser.add_argument("--embedder", choices=("remote", "local"), default="remote",
                        help="remote: a simulated GPU embedding server (/v1/embeddings); local: MiniLM on this CPU")
    parser.add_argument("--cap", type=int, default=None,
                        help="configure max_in_flight per replica (default: none; the pool finds each replica's)")
    parser.add_argument("--max-num-seqs", type=int, default=BenchOptions().max_num_seqs, help="the simulator's batch size")
    parser.add_argument("--cost-model", choices=("vllm", "legacy"), default="vllm",
                        help="legacy: the simulator's old cost model, to compare")
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines per simulated replica")
    parser.add_argument("--metrics-lag-s", type=float, default=0.0, help="how old the simulator's gauges are")
    parser.add_argument("--processes", type=int, default=2, help="shared-fleet: ingest processes on one fleet")
    parser.add_argument("--balancers", default="random,least_busy", help="peers: what routes their requests")
    parser.add_argument("--documents", type=int, default=None, help="documents of the workload (not codebase)")
    parser.add_argument("--waves", type=int, default=8, help="stream: waves of files dropped into the inbox")
    parser.add_argument("--wave-interval", type=float, default=None,
                        help="stream: seconds between waves (default: every file in by half the model floor)")
    parser.add_argument("--ingest-slots", type=int, default=None,
                        help="override dagster.yaml's ctx_ingest pool limit (ingest runs at once) for platform/stream")
    parser.add_argument("--dagster-storage", choices=("sqlite", "postgres"), default="sqlite",
                        help="platform/stream: the Dagster instance's storage: the shipped dagster.yaml (SQLite) or "
                             "deploy/dagster.postgres.yaml on a local Postgres (a deployment's)")
    parser.add_argument("--daemon-first", action="store_true",
                        help="platform: start the daemon before the UI backfill, as a user meets it (its backfill "
                             "loop wakes every 30 s); default: right after, so its first iteration takes it")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    global OPTIONS, BALANCERS_RUN
    OPTIONS = BenchOptions(cap=args.cap, max_num_seqs=args.max_num_seqs, cost_model=args.cost_model,
                           engines=args.engines, metrics_lag_s=args.metrics_lag_s, embedder=args.embedder,
                           ingest_slots=args.ingest_slots, processes=args.processes,
                           dagster_storage=args.dagster_storage, daemon_first=args.daemon_first,
                           **WORKLOAD_OPTIONS.get(args.workload, {}))
    from bench.peers import BALANCERS

    BALANCERS_RUN = tuple(b.strip() for b in args.balancers.split(",") if b.strip())
    if unknown := [b for b in BALANCERS_RUN if b not in BALANCERS]:
        parser.error(f"--balancers: unknown {unknown}; use {', '.join(BALANCERS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if problem := check_modes(modes):
        parser.error(problem)
    if args.documents is not None and args.workload == "codebase":
        parser.error("--documents: the codebase workload is a fixed set")
    if args.time_scale is not None and args.time_scales is not None:
        parser.error("--time-scale and --time-scales: give one")
    try:
        scales = parse_scales(args.time_scales) if args.time_scales else [args.time_scale or 1.0]
    except ValueError as exc:
        parser.error(f"--time-scales: {exc}")
    speeds = workload_speeds(args.workload)
    if {"platform"} & set(modes):
        CPU_MS_PER_EVENT[OPTIONS.dagster_storage] = cpu_ms_per_event(OPTIONS.dagster_storage)

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        build = WORKLOADS[args.workload]
        paths = build(workdir / "corpus") if args.documents is None else build(workdir / "corpus", args.documents)
        docs, counter, settings = corpus_chunks(paths)
        # Timing MiniLM on this CPU is for the platform's local-embedder rows: the pool alone needs none.
        embed_s = embed_seconds(docs) if set(modes) - {"floor"} else None
        per_scale = [run_scale(workdir, scale, paths, docs, counter, settings, modes, args.workload, args.runs,
                               args.waves, args.wave_interval) for scale in scales]
        for entry in per_scale:
            print_table(args.workload, entry["time_scale"], embed_s, entry["rounds"], entry)
        worst = max(per_scale, key=lambda e: e.get("wall_over_model_floor") or 0)
        summary = dict(worst)
        if args.workload == "small":
            summary["sensor_tick"] = run_sensor_tick(workdir, paths)
            if summary.get("wall_s") and summary.get("floor_s"):
                # What a document costs beyond its share of fleet time, and where it goes.
                summary["per_document_overhead_s"] = round((summary["wall_s"] - summary["floor_s"]) / len(paths), 3)
            print(f"sensor tick over {len(paths)} new files: {summary['sensor_tick']['tick_s']} s, "
                  f"{summary['sensor_tick']['run_requests']} run request(s); per-document overhead "
                  f"{summary.get('per_document_overhead_s')} s")
        if len(per_scale) > 1:
            print("sweep: " + ", ".join(f"{e['time_scale']}: {e.get('wall_over_model_floor')}" for e in per_scale)
                  + f" (worst {worst['time_scale']})")
        from contextual_assets.settings import PlatformSettings

        result = {
            "workload": args.workload, "documents": len(paths), "chunks": sum(len(d.chunks) for d in docs),
            "embedder": args.embedder, "embed_s_local_cpu": None if embed_s is None else round(embed_s, 2),
            **({"time_scales": scales} if len(scales) > 1 else {"time_scale": scales[0]}),
            "wall_over_model_floor": worst.get("wall_over_model_floor"),
            "utilization": worst.get("utilization"), "mean_batch_occupancy": worst.get("mean_batch_occupancy"),
            "idle_while_pending_s": worst.get("idle_while_pending_s"),
            "client_cpu_ms_per_request": client_cpu_figure(),
            "max_num_seqs": OPTIONS.max_num_seqs, "cap_configured": OPTIONS.cap, "cost_model": OPTIONS.cost_model,
            "engines": OPTIONS.engines, "metrics_lag_s": OPTIONS.metrics_lag_s,
            "kv_cache_tokens": OPTIONS.sim_spec().kv_cache_tokens or None, "context_tokens": settings.context_tokens,
            "speeds": list(speeds), "peers": worst.get("peers", []),
            "partitions_per_run": PlatformSettings.from_env().partitions_per_run,
            "ingest_slots": OPTIONS.ingest_slots, "dagster_storage": OPTIONS.dagster_storage,
            "daemon_first": OPTIONS.daemon_first,
            "processes": OPTIONS.processes if args.workload == "shared-fleet" else None, "machine": f"{os.cpu_count()} cores",
            "scales": [{k: v for k, v in e.items() if k != "timeline"} for e in per_scale],
            "summary": {k: v for k, v in summary.items() if k not in ("rounds", "peers")},
        }
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
