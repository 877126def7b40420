"""bench.ingest's fleet side: the simulated fleet and embedder, the fleet's figures, the corpus's
requests, and the model and oracle floors (the modes are bench/ingest_mode_*.py)."""

from __future__ import annotations

import time
from pathlib import Path

from bench import ingest_options
from bench.fleet_share import work_share_figures
from bench.ingest_options import EMBED_DIM, EMBED_MODEL, SPEEDS
from bench.model_floor import CostModel, engine_speeds, floor_figures
from bench.sim import SimFleet
from bench.sim_validity import sim_lag

# ---- the simulated fleet, one cold process per measurement -----------------------------------------

def start_fleet(workdir: Path, time_scale: float, speeds: tuple[float, ...] = SPEEDS) -> SimFleet:
    try:
        return SimFleet.start(workdir, time_scale, speeds=speeds, max_num_seqs=ingest_options.OPTIONS.max_num_seqs,
                              cost_model=ingest_options.OPTIONS.cost_model, engines=ingest_options.OPTIONS.engines,
                              metrics_lag_s=ingest_options.OPTIONS.metrics_lag_s, kv_cache_tokens=ingest_options.OPTIONS.kv_cache_tokens)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from exc


class EmbedServer:
    """`--embedder remote`: one simulated GPU embedding server (`/v1/embeddings`, a GPU-like cost
    model), as a deployment with a GPU embedder or TEI has; started per measurement like the fleet."""

    def __init__(self, workdir: Path, time_scale: float):
        self.sim = None
        if ingest_options.OPTIONS.embedder == "remote":
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
        result["mean_batch_occupancy"] = (round(result["mean_batch"] / ingest_options.OPTIONS.max_num_seqs, 4)
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
    from contextual_assets.ingest.inbox.document_keys import partition_key_for
    from contextual_assets.ingest.pipeline.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter
    from contextual_assets.settings import PlatformSettings

    # A workload's own context budget (kv-stress), else the platform's default.
    settings = PlatformSettings(**({"context_tokens": ingest_options.OPTIONS.context_tokens} if ingest_options.OPTIONS.context_tokens else {}))
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
    return HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=ingest_options.OPTIONS.cap) for u in base_urls],
                                   metrics_lag_s=ingest_options.OPTIONS.metrics_lag_s), discovery=ModelDiscovery())


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
             for _, request in chunk_requests(doc, counter, settings, source, ingest_options.OPTIONS.sim_spec().max_model_len)]
    return [request_body(r) for _, r in pairs], [doc_id for doc_id, _ in pairs]


def model_floor(docs, counter, settings, time_scale: float, speeds: tuple[float, ...] = SPEEDS) -> dict:
    """`model_floor_s` and its totals (bench/model_floor.py): no fleet, no network. The cost model is one
    engine's, so each replica counts once per engine."""
    bodies, _ = corpus_bodies(docs, counter, settings)
    spec = ingest_options.OPTIONS.sim_spec()
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
    figures = oracle_floor(bodies, speeds, time_scale, ingest_options.OPTIONS.sim_spec(), documents=documents, arrivals=arrivals)
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


def loaded_embedder():
    from contextual_assets.embedding import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    embedder.warm()
    return embedder


def corpus_halves(paths: list[Path]) -> list[Path]:
    """The folders holding the corpus (a/ and b/ for shared-fleet), one `ctx ingest` each."""
    return sorted({p.parent for p in paths})
