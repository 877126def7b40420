"""Ingest throughput on the fleet simulator: floor, platform (a real UI backfill) and legacy loop.

    python -m bench.ingest --workload seed --json bench/out/ingest_seed.json [--runs 3]

Fleet: 4 simulated vLLM replicas (speeds 1, 1, 0.775, 0.775; in-flight cap 16 each), run as a
separate process with a cold cache for every measurement. Its time scale is calibrated so that the
floor is about twice the corpus's CPU embedding time on this machine (the LLM stays the bottleneck,
as on real GPUs); pass --time-scale to fix it instead.

* floor: every header request of the corpus sent straight to the fleet (the platform's own request
  pool, every request submitted at once): the time the fleet needs for the work, nothing else;
* platform: a backfill of every document partition launched through the webserver's GraphQL API
  (the UI's mutation), executed by `dagster-daemon` with the run queue and executor shipped in
  dagster.yaml: real parsing, headers from the fleet, embedding with the bundled MiniLM, commits to
  DuckDB. wall_s runs from the launch of the first run (its process start) to the last commit;
  submit_to_launch_s (daemon pick-up and dequeue) is reported apart;
* legacy: the same components in a document-by-document loop in this process (all headers of a
  document, then embed, then commit, then the next document), with the embedder already loaded.

Idle while pending: whole seconds, from the first header request to the last one admitted by a
replica, in which no replica's `vllm:prompt_tokens` counter moved (from /metrics sampled at 10 Hz).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.report import write_json
from bench.sim import SimFleet

SPEEDS = (1.0, 1.0, 0.775, 0.775)
CAP = 16
REPO_ROOT = Path(__file__).resolve().parent.parent
CODEBASE = REPO_ROOT.parent / "shared" / "datasets" / "anthropic-codebase" / "codebase_chunks.json"


# ---- workloads -----------------------------------------------------------------------------------

_TOPICS = ["ingestion", "retention", "billing", "routing", "replication", "auditing", "scheduling", "pricing",
           "escalation", "calibration", "provisioning", "forecasting", "sampling", "licensing", "onboarding"]
_WORDS = ("the a of to and in for on with by from at as under over between each every after before when "
          "which that this those these system operator contract clause vendor customer report ledger shipment "
          "invoice schedule threshold sensor pump valve reading incident review approval budget payment "
          "penalty delivery warranty inspection record quarter region policy service level target metric "
          "variance baseline exception filing notice period renewal term fee rate credit balance account "
          "station crew shift handover log maintenance interval pressure temperature flow alarm relay").split()


def _sentence(rng, topic: str, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    words.insert(rng.randrange(len(words)), topic)
    words.insert(rng.randrange(len(words)), f"{rng.choice(['ref', 'item', 'case'])}-{rng.randrange(10000):04d}")
    return " ".join(words).capitalize() + "."


def build_seed(dest: Path, documents: int = 5, sections: int = 14, paragraphs: int = 10) -> list[Path]:
    """Long PDFs with an outline and headings: `sections` sections of `paragraphs` paragraphs each
    (~140 chunks per document at 200 tokens a chunk)."""
    import random

    import pymupdf

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(1000 + d)
        doc = pymupdf.open()
        toc = []
        page = doc.new_page()
        y = 72.0

        def write(text: str, size: float, font: str) -> None:
            nonlocal page, y
            box_height = 14 + size * 1.3 * (len(text) // int(900 / size) + 1)
            if y + box_height > 780:
                page = doc.new_page()
                y = 72.0
            rect = pymupdf.Rect(72, y, 523, y + box_height)
            page.insert_textbox(rect, text, fontsize=size, fontname=font)
            y += box_height

        for s in range(sections):
            topic = _TOPICS[(d + s) % len(_TOPICS)]
            title = f"{s + 1}. {topic.capitalize()} {rng.choice(['procedure', 'terms', 'controls', 'requirements'])}"
            if y > 600:
                page = doc.new_page()
                y = 72.0
            toc.append([1, title, doc.page_count])
            write(title, 15, "hebo")
            for _ in range(paragraphs):
                write(" ".join(_sentence(rng, topic, rng.randint(14, 22)) for _ in range(7)), 10, "helv")
        doc.set_toc(toc)
        path = dest / f"operations_manual_{d + 1:02d}.pdf"
        doc.save(path, garbage=3, deflate=True)
        doc.close()
        paths.append(path)
    return paths


def build_codebase(dest: Path) -> list[Path]:
    """The 90 files of the Anthropic codebase set, one pre-chunked JSON per file (737 chunks)."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(json.loads(CODEBASE.read_text())):
        path = dest / f"{i:02d}_{Path(doc['doc_id']).name.replace('.', '_')}.json"
        path.write_text(json.dumps([doc]))
        paths.append(path)
    return paths


def build_small(dest: Path, documents: int = 200) -> list[Path]:
    """Short Markdown notes: two sections, one or two chunks each."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(5000 + d)
        topic = _TOPICS[d % len(_TOPICS)]
        parts = [f"# Note {d + 1}: {topic}\n"]
        for s in range(2):
            parts.append(f"## Part {s + 1}\n")
            parts.append(" ".join(_sentence(rng, topic, rng.randint(12, 20)) for _ in range(rng.randint(4, 9))) + "\n")
        path = dest / f"note_{d + 1:03d}.md"
        path.write_text("\n".join(parts))
        paths.append(path)
    return paths


WORKLOADS = {"seed": build_seed, "codebase": build_codebase, "small": build_small}


# ---- the simulated fleet, one cold process per measurement -----------------------------------------

def start_fleet(workdir: Path, time_scale: float) -> SimFleet:
    try:
        return SimFleet.start(workdir, time_scale, speeds=SPEEDS, max_num_seqs=CAP)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from exc


def fleet_figures(sim: SimFleet, timeline) -> dict:
    """Shares per replica and the idle seconds of the sampled /metrics timeline."""
    stats = sim.stats()
    completed = [s["completed"] for s in stats]
    total = sum(completed) or 1
    capacity = [s / sum(SPEEDS) for s in SPEEDS]
    share = [c / total for c in completed]
    figures = {
        "replica_share": [round(x, 4) for x in share],
        "capacity_share": [round(x, 4) for x in capacity],
        "share_max_relative_error": round(max(abs(a - b) / b for a, b in zip(share, capacity)), 4),
        "sim_busy_s": [round(s["busy_s"], 2) for s in stats],
        "requests": total,
    }
    figures.update(idle_figures(timeline))
    return figures


def idle_figures(timeline, capacity: int = CAP * len(SPEEDS)) -> dict:
    """From 10 Hz /metrics samples: when the first and last request were admitted, and the seconds
    between them that were idle (see `idle_seconds`)."""
    moves: list[float] = []  # times at which some replica's prompt-token counter had moved
    for samples in timeline.samples.values():
        for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
            if v1.get("vllm:prompt_tokens", 0) > v0.get("vllm:prompt_tokens", 0):
                moves.append(t1)
    rows = timeline.per_second()
    if not moves:
        return {"first_request_t": None, "last_admission_t": None, "idle_while_pending_s": None,
                "prompt_counter_still_s": None, "timeline": rows}
    return {"first_request_t": min(moves), "last_admission_t": max(moves), **idle_seconds(rows, capacity),
            "timeline": rows}


def idle_seconds(rows: list[dict], capacity: int) -> dict:
    """Per-second rows of the timeline, from the first second in which a prompt-token counter moved
    to the last: `prompt_counter_still_s` counts the seconds in which none moved; of those,
    `idle_while_pending_s` counts the ones that ended with a free slot in the fleet. A second that
    ends with every slot running was busy throughout: without an admission the number running can
    only fall, and a fall with requests queued is an admission (a first wave of requests that start
    and finish together decodes for seconds without one)."""
    moved = [r["t"] for r in rows if r["prompt_tokens"] > 0]
    if not moved:
        return {"idle_while_pending_s": None, "prompt_counter_still_s": None, "pending_span_s": 0}
    window = [r for r in rows if moved[0] <= r["t"] <= moved[-1]]
    still = [r for r in window if r["prompt_tokens"] <= 0]
    return {"idle_while_pending_s": sum(1 for r in still if r["running"] < capacity),
            "prompt_counter_still_s": len(still), "pending_span_s": len(window)}


# ---- the corpus's requests and embedding time -------------------------------------------------

def corpus_chunks(paths: list[Path]):
    from contextual_assets.ingest.document_keys import partition_key_for
    from contextual_assets.ingest.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter
    from contextual_assets.settings import PlatformSettings

    settings = PlatformSettings()
    counter = token_counter()
    docs = [parse_document(partition_key_for(p.name), p, counter, chunk_tokens=settings.chunk_tokens,
                           max_bytes=10**9, max_pdf_pages=10**6) for p in paths]
    return docs, counter, settings


def embed_seconds(docs) -> float:
    """CPU embedding time of the corpus (header-sized text + chunk), model already loaded."""
    from contextual_assets.embedding import SentenceTransformerEmbedder, embedding_text

    embedder = SentenceTransformerEmbedder()
    embedder.embed(["warm up"])
    header = " ".join(["This passage covers the section's subject in the document named here."] * 3)
    texts = [embedding_text(header, c.text) for d in docs for c in d.chunks]
    started = time.monotonic()
    for i in range(0, len(texts), 64):
        embedder.embed(texts[i: i + 64])
    return time.monotonic() - started


def header_fleet(base_urls: list[str]):
    from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.pool import HeaderFleet

    return HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=CAP) for u in base_urls]),
                       discovery=ModelDiscovery())


def header_source(fleet, counter, store=None):
    from contextual_assets.headers.openai_source import OpenAIHeaderSource
    from contextual_assets.headers.prompt import DEFAULT_PROMPT, load_prompt

    return OpenAIHeaderSource(fleet, load_prompt(DEFAULT_PROMPT), counter, store=store)


def run_floor(workdir: Path, time_scale: float, docs, counter, settings) -> dict:
    from contextual_assets.fleet.vllm_metrics import MetricsSampler
    from contextual_assets.headers.budget import fit_prompt
    from contextual_assets.headers.context import header_requests

    sim = start_fleet(workdir, time_scale)
    fleet = header_fleet(sim.base_urls)
    try:
        source = header_source(fleet, counter)
        requests = []
        for doc in docs:
            for request in header_requests(doc, counter, settings.context_tokens):
                fitted = fit_prompt(request, source.prompt, counter, context_limit=fleet.context_limit,
                                    max_output_tokens=source.max_output_tokens, safety=source.token_safety)
                requests.append(source._single(request, fitted))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        results = fleet.run(requests)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise SystemExit(f"floor: {len(failed)} requests failed: {failed[0]}")
        figures = fleet_figures(sim, timeline)
    finally:
        fleet.close()
        sim.stop()
    figures.pop("timeline")
    return {"wall_s": round(wall, 2), **figures}


def calibrate(workdir: Path, docs, counter, settings, embed_s: float, probe_scale: float = 0.5) -> float:
    """The time scale at which the floor is twice the embedding time. Floor wall time is linear in
    the scale while the client keeps the fleet full, so one probe at `probe_scale` fixes it."""
    probe = run_floor(workdir, probe_scale, docs, counter, settings)
    return round(probe_scale * 2 * embed_s / probe["wall_s"], 4)


def run_legacy(workdir: Path, time_scale: float, docs, counter, settings) -> dict:
    from contextual_assets.embedding import SentenceTransformerEmbedder, embed_chunks
    from contextual_assets.fleet.vllm_metrics import MetricsSampler
    from contextual_assets.headers.context import header_requests
    from contextual_assets.index_version import index_fingerprint, index_version_of
    from contextual_assets.models import DocumentRecord, HeaderedChunk, SourceRecord
    from contextual_assets.store import open_store

    store = open_store(None, workdir / f"legacy-{time.monotonic_ns()}.duckdb")
    embedder = SentenceTransformerEmbedder()
    embedder.warm()
    sim = start_fleet(workdir, time_scale)
    fleet = header_fleet(sim.base_urls)
    try:
        source = header_source(fleet, counter, store=store)
        version = index_version_of(index_fingerprint(source.identity, embedder.identity, settings.chunk_tokens))
        store.register_index_version(version, index_fingerprint(source.identity, embedder.identity,
                                                                settings.chunk_tokens))
        for doc in docs:
            store.register_source(SourceRecord(doc_id=doc.doc_id, path=doc.source_path, file_hash=doc.file_hash))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        for doc in docs:
            # The legacy loop: one document at a time, its headers, then its embedding and commit.
            results = source.generate(header_requests(doc, counter, settings.context_tokens))
            headered = [HeaderedChunk(**chunk.model_dump(), header=result.header, header_source=result.source,
                                      header_model=result.model) for chunk, result in zip(doc.chunks, results)]
            embedded = embed_chunks(headered, embedder)
            store.replace_document(DocumentRecord(
                doc_id=doc.doc_id, index_version=version, source_path=doc.source_path, kind=doc.kind, title=doc.title,
                file_hash=doc.file_hash, n_chunks=len(embedded), updated_at=""), embedded)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline)
        chunks = store.count_chunks(version)
    finally:
        fleet.close()
        sim.stop()
        store.close()
    return {"wall_s": round(wall, 2), "chunks": chunks, **figures}


def run_platform(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                 timeout_s: float = 1800) -> dict:
    import dagster as dg

    from bench.sim.deployment import (
        DagsterDeployment,
        deployment_env,
        seed_dagster_home,
    )
    from contextual_assets.fleet.vllm_metrics import MetricsSampler
    from contextual_assets.ingest.document_keys import partition_key_for
    from contextual_assets.ingest.inbox import file_sha256
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    root = workdir / f"platform-{time.monotonic_ns()}"
    home = seed_dagster_home(root / "dagster_home")
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(root / "inbox"),
                         CTX_DUCKDB_PATH=str(duckdb_path), CTX_HEADER_SOURCE="openai",
                         CTX_LLM_BASE_URLS=",".join(sim.base_urls), CTX_LLM_MAX_IN_FLIGHT=str(CAP),
                         **{k: v for k, v in os.environ.items() if k == "CTX_PARTITIONS_PER_RUN"})
    keys = [partition_key_for(p.name) for p in paths]
    store = open_store(None, duckdb_path)
    for key, path in zip(keys, paths):
        store.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
    store.close()
    instance = dg.DagsterInstance.from_config(str(home))
    instance.add_dynamic_partitions("documents", keys)
    deployment = DagsterDeployment(root=root, env=env)
    sampler = None
    try:
        deployment.start_webserver()
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        submitted = time.time()
        backfill_id = deployment.launch_backfill(keys, title=f"bench.ingest {len(keys)} documents")
        deployment.start_daemon()  # its first backfill iteration picks the backfill up at once
        backfill = deployment.wait_backfill(backfill_id, timeout_s=timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline)
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
    finally:
        if sampler is not None:
            sampler.stop()
        deployment.stop_all()
        instance.dispose()
        sim.stop()
    store = open_store(None, duckdb_path)
    try:
        chunks = store.count_chunks()
        documents = len(store.documents())
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
        "wall_s": round(last_commit - first_launch, 2),
        "submit_to_launch_s": round(first_launch - submitted, 2),
        "startup_s": round(first_request - first_launch, 2) if first_request else None,
        "run_start_s": round(min(run_starts) - first_launch, 2) if run_starts else None,
        "tail_s": round(last_commit - (figures["last_admission_t"] + offset), 2),
        "runs": len(runs),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        **figures,
    }


def run_sensor_tick(workdir: Path, paths: list[Path]) -> dict:
    """One `new_documents` tick over an inbox holding the corpus (every file new), as the daemon
    evaluates it: how long the tick takes and how many runs it requests."""
    import shutil

    import dagster as dg

    from contextual_assets.defs.definitions import build_definitions, build_resources
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

def one_round(workdir: Path, time_scale: float, paths, docs, counter, settings, modes: list[str]) -> dict:
    expected = sum(len(d.chunks) for d in docs)
    out: dict = {}
    if "floor" in modes:
        out["floor"] = run_floor(workdir, time_scale, docs, counter, settings)
    if "platform" in modes:
        out["platform"] = run_platform(workdir, time_scale, paths, expected)
    if "legacy" in modes:
        out["legacy"] = run_legacy(workdir, time_scale, docs, counter, settings)
    return out


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
    }
    ratios = {"wall_over_floor": [], "legacy_over_platform": [], "idle_share": []}
    for r in rounds:
        if "platform" in r and "floor" in r:
            ratios["wall_over_floor"].append(r["platform"]["wall_s"] / r["floor"]["wall_s"])
        if "platform" in r and "legacy" in r:
            ratios["legacy_over_platform"].append(r["legacy"]["wall_s"] / r["platform"]["wall_s"])
        if "platform" in r and r["platform"].get("idle_while_pending_s") is not None:
            ratios["idle_share"].append(r["platform"]["idle_while_pending_s"] / r["platform"]["wall_s"])
    for name, values in ratios.items():
        summary[name] = round(statistics.median(values), 3) if values else None
    last = rounds[-1].get("platform", {})
    summary.update({"replica_share": last.get("replica_share"), "capacity_share": last.get("capacity_share"),
                    "share_max_relative_error": max((r[m]["share_max_relative_error"] for r in rounds for m in r),
                                                    default=None),
                    "chunks": last.get("chunks"), "runs_per_backfill": last.get("runs"),
                    "timeline": last.get("timeline")})
    return summary


def print_table(workload: str, time_scale: float, embed_s: float, rounds: list[dict], summary: dict) -> None:
    print(f"workload {workload}: {summary['chunks']} chunks; embedding {embed_s:.1f} s on this CPU; "
          f"fleet time scale {time_scale}")
    print(f"{'round':>5s} {'floor s':>8s} {'platform s':>11s} {'legacy s':>9s} {'wall/floor':>11s} "
          f"{'legacy/plat':>12s} {'idle s':>7s} {'startup s':>10s} {'tail s':>7s} {'share err':>10s}")
    for i, r in enumerate(rounds, 1):
        f, p, lg = r.get("floor", {}), r.get("platform", {}), r.get("legacy", {})
        ratio = p["wall_s"] / f["wall_s"] if p and f else float("nan")
        lratio = lg["wall_s"] / p["wall_s"] if p and lg else float("nan")
        print(f"{i:5d} {f.get('wall_s', float('nan')):8.2f} {p.get('wall_s', float('nan')):11.2f} "
              f"{lg.get('wall_s', float('nan')):9.2f} {ratio:11.3f} {lratio:12.3f} "
              f"{p.get('idle_while_pending_s') or 0:7d} {p.get('startup_s') or float('nan'):10.2f} "
              f"{p.get('tail_s') or float('nan'):7.2f} "
              f"{max(x['share_max_relative_error'] for x in r.values()):10.3f}")
    print(f"median: wall/floor {summary['wall_over_floor']}, legacy/platform {summary['legacy_over_platform']}, "
          f"idle while pending {summary['idle_while_pending_s']} s ({summary['idle_share']} of wall), "
          f"startup {summary['startup_s']} s, daemon pick-up {summary['submit_to_launch_s']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="seed")
    parser.add_argument("--runs", type=int, default=1, help="rounds of every mode; medians are reported")
    parser.add_argument("--modes", default="floor,platform,legacy")
    parser.add_argument("--time-scale", type=float, default=None, help="fix the fleet's time scale (no calibration)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        paths = WORKLOADS[args.workload](workdir / "corpus")
        docs, counter, settings = corpus_chunks(paths)
        embed_s = embed_seconds(docs)
        time_scale = args.time_scale or calibrate(workdir, docs, counter, settings, embed_s)
        rounds = []
        for i in range(args.runs):
            rounds.append(one_round(workdir, time_scale, paths, docs, counter, settings, modes))
            print(f"round {i + 1}: " + ", ".join(f"{m} {r['wall_s']} s" for m, r in rounds[-1].items()), flush=True)
        summary = summarize(rounds)
        if args.workload == "small":
            summary["sensor_tick"] = run_sensor_tick(workdir, paths)
            platform = [r["platform"] for r in rounds if "platform" in r]
            floor = [r["floor"] for r in rounds if "floor" in r]
            if platform and floor:
                # What a document costs beyond its share of fleet time, and where it goes.
                summary["per_document_overhead_s"] = round(
                    (summary["wall_s"] - summary["floor_s"]) / len(paths), 3)
        print_table(args.workload, time_scale, embed_s, rounds, summary)
        if "sensor_tick" in summary:
            print(f"sensor tick over {len(paths)} new files: {summary['sensor_tick']['tick_s']} s, "
                  f"{summary['sensor_tick']['run_requests']} run request(s); per-document overhead "
                  f"{summary.get('per_document_overhead_s')} s")
        from contextual_assets.settings import PlatformSettings

        result = {
            "workload": args.workload, "documents": len(paths), "chunks": sum(len(d.chunks) for d in docs),
            "embed_s": round(embed_s, 2), "time_scale": time_scale, "speeds": list(SPEEDS), "cap": CAP,
            "partitions_per_run": PlatformSettings.from_env().partitions_per_run,
            "machine": f"{os.cpu_count()} cores", "rounds": rounds, **summary,
        }
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
