"""The header fleet against the vLLM-like fleet simulator (real HTTP on loopback): routing, caps,
retries, failover, circuit breaking, budgets, cache hits on re-run, structured batching."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import time

import pytest

from bench.sim import FleetSimulator, ReplicaSpec
from contextual_assets.errors import ConfigurationError, HeaderGenerationError
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.discovery import ModelDiscovery
from contextual_assets.fleet.metrics_timeline import MetricsSampler
from contextual_assets.fleet.pool import (
    FleetRequest,
    FleetUnavailableError,
    HeaderFleet,
)
from contextual_assets.headers.base import HeaderRequest
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.headers.prompt import load_prompt
from contextual_assets.models import Chunk, content_hash
from contextual_assets.parsing.tokens import token_counter
from contextual_assets.store import open_store


@contextlib.contextmanager
def simulated_fleet(specs, time_scale: float, cap: int = 16, **overrides):
    """A simulated fleet and a `HeaderFleet` client of it (fresh discovery cache), both closed after."""
    with FleetSimulator(specs, time_scale=time_scale) as sim:
        replicas = [ReplicaConfig(base_url=u, max_in_flight=cap) for u in sim.base_urls]
        overrides.setdefault("breaker_cooldown_s", 0.5)
        fleet = HeaderFleet(FleetConfig(replicas=replicas, **overrides), discovery=ModelDiscovery())
        try:
            yield sim, fleet
        finally:
            fleet.close()


def prompt_request(i: int, words: int = 200) -> FleetRequest:
    body = " ".join(f"w{i}x{j}" for j in range(words))
    return FleetRequest(messages=[{"role": "user", "content": f"<chunk>\nitem {i} {body}\n</chunk>"}],
                        est_prompt_tokens=words + 10, max_tokens=60, label=f"request {i}")


def results_ok(results):
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    return results


def test_discovery_and_context_limit_from_models_endpoint():
    with simulated_fleet([ReplicaSpec(max_model_len=4096), ReplicaSpec(max_model_len=8192)], time_scale=0.05) as (sim, fleet):
        assert fleet.model == "sim-model" and fleet.context_limit == 4096


def test_a_pool_shortens_the_gil_switch_interval_and_never_lengthens_it():
    """The loop thread that sends every request waits for the GIL up to the switch interval each time the
    process's other threads (parsing, fitting, Dagster events) hold it: a pool lowers it to 0.5 ms."""
    import sys

    from contextual_assets.fleet.pool import GIL_SWITCH_INTERVAL_S

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # Python's default
        with simulated_fleet(1, time_scale=0.05):
            assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL_S, rel=0.05)
        sys.setswitchinterval(0.0001)
        with simulated_fleet(1, time_scale=0.05):
            assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05), "a shorter one is kept"
    finally:
        sys.setswitchinterval(before)


def test_in_flight_cap_is_never_exceeded():
    # Long enough to outlast the slow start (half the cap until the replicas' /metrics were read twice).
    with simulated_fleet(2, time_scale=0.05, cap=3) as (sim, fleet):
        results_ok(fleet.run([prompt_request(i) for i in range(120)]))
        assert [s.peak_in_flight for s in fleet.replicas] == [3, 3]
        assert sum(s["completed"] for s in sim.stats()) == 120


def test_retries_absorb_errors():
    with simulated_fleet(2, time_scale=0.05, breaker_failures=100) as (sim, fleet):
        sim.set_faults(0, error_rate=0.3, seed=7)
        results_ok(fleet.run([prompt_request(i) for i in range(60)]))
        assert fleet.counters.retries > 0 and fleet.counters.errors.get("http_500", 0) > 0


def test_killed_replica_fails_over_and_breaker_opens():
    with simulated_fleet(3, time_scale=0.5, cap=4, breaker_failures=2, breaker_cooldown_s=60) as (sim, fleet):
        futures = [fleet.submit(prompt_request(i, words=600)) for i in range(90)]
        while sim.stats()[1]["completed"] < 4:  # the replica is mid-run when it dies
            time.sleep(0.05)
        sim.kill(1)
        results = [f.result(timeout=120) for f in futures]
        assert len(results) == 90
        killed = fleet.replicas[1]
        assert killed.breaker.state == "open" and killed.breaker.trips >= 1
        assert fleet.counters.failovers > 0
        assert sum(r.failovers for r in results) > 0
        # While open, the dead replica gets no traffic: failures stay bounded.
        assert killed.failures <= 4 + 2


def test_breaker_probe_recovers_a_restarted_replica():
    with simulated_fleet(2, time_scale=0.05, cap=2, breaker_failures=1, breaker_cooldown_s=0.3) as (sim, fleet):
        sim.kill(1)
        results_ok(fleet.run([prompt_request(i) for i in range(10)]))
        assert fleet.replicas[1].breaker.trips >= 1
        sim.restart(1)
        time.sleep(0.4)
        results = results_ok(fleet.run([prompt_request(i) for i in range(10, 40)]))
        assert any(r.replica == sim.base_urls[1] for r in results), "the probe closed the breaker"
        assert fleet.replicas[1].breaker.state == "closed"


def test_every_replica_down_fails_within_bounded_time():
    # 50 attempts with backoff would take minutes: only the fleet-down timeout ends this one early.
    with simulated_fleet(2, time_scale=0.05, breaker_failures=1, breaker_cooldown_s=0.2, unavailable_timeout_s=1.5,
                         max_attempts=50, retry_budget_min=1000) as (sim, fleet):
        sim.kill(0)
        sim.kill(1)
        (result,) = fleet.run([prompt_request(0)])
        assert isinstance(result, FleetUnavailableError), result
        assert "every replica has been failing for over 2 s" in str(result)
        assert all(url in str(result) for url in sim.base_urls)


def test_retry_budget_is_fleet_wide():
    with simulated_fleet(2, time_scale=0.05, breaker_failures=1000, retry_budget_min=5, retry_budget_ratio=0.0,
                         max_attempts=10) as (sim, fleet):
        sim.set_faults(0, error_rate=1.0)
        sim.set_faults(1, error_rate=1.0)
        results = fleet.run([prompt_request(i) for i in range(6)])
        assert all(isinstance(r, HeaderGenerationError) for r in results)
        assert fleet.counters.retries == 5
        assert any("retry budget exhausted" in str(r) for r in results)


def test_shared_pool_across_threads_respects_caps():
    with simulated_fleet(2, time_scale=0.05, cap=2) as (sim, fleet):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            batches = list(pool.map(lambda b: fleet.run([prompt_request(b * 100 + i) for i in range(10)]), range(4)))
        assert all(not isinstance(r, BaseException) for batch in batches for r in batch)
        assert max(s.peak_in_flight for s in fleet.replicas) == 2


def chunk_requests(n: int, words: int = 60) -> list[HeaderRequest]:
    chunks = []
    for i in range(n):
        text = " ".join(f"fact{i}word{j}" for j in range(words)) + "."
        chunks.append(Chunk(doc_id="doc", source_doc="doc", title="Handbook", ordinal=i, section_path=["Leave"],
                            text=text, token_count=words, content_hash=content_hash(text)))
    return [HeaderRequest(chunk=c, before=[p.text for p in reversed(chunks[:i])][:2],
                          after=[p.text for p in chunks[i + 1 :]][:2]) for i, c in enumerate(chunks)]


def test_header_cache_makes_a_rerun_free(tmp_path):
    store = open_store(None, tmp_path / "s.duckdb")
    with simulated_fleet(2, time_scale=0.05) as (sim, fleet):
        source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(),
                                    header_cache=store.header_cache if store is not None else None)
        first = source.generate(chunk_requests(12))
        assert source.last_stats.requests == 12 and source.last_stats.cache_hits == 0
        sent = fleet.counters.sent
        second = source.generate(chunk_requests(12))
        assert source.last_stats.cache_hits == 12 and fleet.counters.sent == sent
        assert [r.header for r in second] == [r.header for r in first]
        # A different prompt version is a different key: no stale hits.
        from contextual_assets.headers.prompt import PROMPTS_DIR

        reworded = tmp_path / "header_v2_reworded.txt"
        reworded.write_text((PROMPTS_DIR / "header_v2.txt").read_text().replace("header-v2", "header-v2-reworded"))
        other = OpenAIHeaderSource(fleet, load_prompt(str(reworded)), token_counter(),
                                   header_cache=store.header_cache if store is not None else None)
        other.generate(chunk_requests(2))
        assert other.last_stats.cache_hits == 0


@pytest.fixture(params=["duckdb", "postgres"])
def header_store(request, tmp_path):
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    store = open_store(url, tmp_path / "s.duckdb")
    yield store
    store.close()


def shared_clause(doc_id: str, title: str, section: str) -> HeaderRequest:
    """The same paragraph (a standard clause) in another document, under another title and section."""
    text = "Either party may terminate this agreement with ninety days written notice to the other party."
    chunk = Chunk(doc_id=doc_id, source_doc=doc_id, title=title, ordinal=0, section_path=[section], text=text,
                  token_count=16, content_hash=content_hash(text))
    return HeaderRequest(chunk=chunk, before=[], after=[])


def test_a_paragraph_shared_by_two_documents_gets_a_header_for_each(header_store):
    """Issue 39 (1): the cache key covers everything the prompt is built from, so the second document's
    copy of a shared clause is not served the header written for the first document's title."""
    with simulated_fleet(1, time_scale=0.05) as (sim, fleet):
        source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(), header_cache=header_store.header_cache)
        source.generate([shared_clause("supply.pdf", "Supply Agreement with Acme", "12 Termination")])
        assert source.last_stats.requests == 1
        source.generate([shared_clause("lease.pdf", "Office Lease for Harbour Street", "9 Ending the lease")])
        assert source.last_stats.cache_hits == 0 and source.last_stats.requests == 1
        # The same document again is still free: the key is stable for unchanged inputs.
        source.generate([shared_clause("lease.pdf", "Office Lease for Harbour Street", "9 Ending the lease")])
        assert source.last_stats.cache_hits == 1 and source.last_stats.requests == 0


def test_budget_trims_context_to_max_model_len():
    with simulated_fleet([ReplicaSpec(max_model_len=700)], time_scale=0.05) as (sim, fleet):
        source = OpenAIHeaderSource(fleet, load_prompt(), token_counter())
        results = source.generate(chunk_requests(6, words=30))
        assert len(results) == 6 and source.last_stats.trimmed_contexts > 0
        assert sim.stats()[0]["rejected"] == 0, "no request overflowed the context"
        # A chunk over the context alone is shown from its start, cut to fit: the server takes it.
        (result,) = source.generate(chunk_requests(1, words=900))
        assert result.source == "openai" and source.last_stats.cut_chunks == 1
        assert sim.stats()[0]["rejected"] == 0


def test_structured_batching_and_fallback():
    with simulated_fleet(2, time_scale=0.05) as (sim, fleet):
        source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(), batch_size=4,
                                    batch_prompt=load_prompt("header_batch_v1"))
        results = source.generate(chunk_requests(8))
        assert len(results) == 8 and all(r.header for r in results)
        assert source.last_stats.batch_requests == 2 and source.last_stats.batch_fallbacks == 0
        assert source.identity["prompt_version"] == "header-v2+header-batch-v1/k4"
        sim.set_faults(0, malformed="bad_json")
        sim.set_faults(1, malformed="bad_json")
        results = source.generate(chunk_requests(8))
        assert len(results) == 8 and source.last_stats.batch_fallbacks == 2


def test_a_chunk_that_falls_back_still_counts_the_requests_it_cost():
    with simulated_fleet(2, time_scale=0.05) as (sim, fleet):
        sim.set_faults(0, malformed="empty")
        sim.set_faults(1, malformed="empty")
        source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(), fallback_share=1.0)
        results = source.generate(chunk_requests(3))
        stats = source.last_stats
        assert stats.fallbacks == 3 and {r.source for r in results} == {"structural"}
        served = sum(s["malformed_injected"] for s in sim.stats())  # the servers' own count
        assert stats.requests == served == 3 * fleet.config.max_attempts
        assert stats.retries == served - 3


def test_metrics_sampler_builds_a_timeline():
    with simulated_fleet(2, time_scale=0.05) as (sim, fleet):
        with MetricsSampler(sim.base_urls, interval_s=0.05) as sampler:
            results = results_ok(fleet.run([prompt_request(i, words=400) for i in range(64)]))
            sampler.sample()  # a pass after the last answer: the timeline holds every prompt token
        rows = sampler.timeline.per_second()
        assert sum(r["prompt_tokens"] for r in rows) == sum(r.prompt_tokens for r in results) > 0
        assert set(sampler.timeline.samples) == set(sim.base_urls)


def test_a_pass_taken_when_work_ends_counts_it_however_late_the_sampler_thread_is():
    # The thread takes its first pass at start, then sleeps for an hour: only sample() sees the work.
    with simulated_fleet(1, time_scale=0.05) as (sim, fleet):
        with MetricsSampler(sim.base_urls, interval_s=3600) as sampler:
            before = sum(r["prompt_tokens"] for r in sampler.timeline.per_second())
            results = results_ok(fleet.run([prompt_request(i, words=200) for i in range(8)]))
            sampler.sample()
            rows = sampler.timeline.per_second()
    assert before == 0
    assert sum(r["prompt_tokens"] for r in rows) == sum(r.prompt_tokens for r in results) > 0


def test_ingest_through_dagster_on_the_simulated_fleet(tmp_path, samples_dir, settings_factory):
    import dagster as dg

    from contextual_assets.cli.ingest_runs import (
        collect_sources,
        ingest_partitions,
        register_sources,
    )
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    with FleetSimulator(3, time_scale=0.05) as sim:
        settings = settings_factory(header_source="openai", llm_base_urls=",".join(sim.base_urls),
                                    llm_sample_metrics=True)
        defs = build_definitions(settings)
        store = build_resources(settings)["store"].open()
        instance = dg.DagsterInstance.ephemeral()
        sources, _ = collect_sources([samples_dir / "supply_agreement.pdf"], inbox=tmp_path / "inbox",
                                     source_root=samples_dir)
        register_sources(store, instance, sources)
        (outcome,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
        assert outcome.success, outcome.error
        metadata = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers")).asset_materialization.metadata
        assert metadata["served_model"].value == "sim-model" and metadata["context_limit"].value == 32768
        assert set(metadata["replica_share"].value) == set(sim.base_urls)
        assert metadata["requests"].value == outcome.chunks and metadata["cache_hits"].value == 0
        assert metadata["latency_p95_s"].value >= metadata["latency_p50_s"].value > 0
        assert any(row["prompt_tokens"] > 0 for row in metadata["fleet_timeline"].value)
        stored = store.corpus.chunks(metadata["index_version"].value)
        assert all(c.header.startswith("This passage") for c in stored)
        completed = sum(s["completed"] for s in sim.stats())
        (again,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
        assert again.success and sum(s["completed"] for s in sim.stats()) == completed, "a re-run makes no LLM call"


def test_fleet_recovers_after_an_outage_longer_than_the_timeout():
    with simulated_fleet(2, time_scale=0.05, breaker_failures=1, breaker_cooldown_s=0.2, unavailable_timeout_s=0.5,
                         max_attempts=20, retry_budget_min=1000) as (sim, fleet):
        sim.kill(0)
        sim.kill(1)
        (down,) = fleet.run([prompt_request(0)])
        assert isinstance(down, FleetUnavailableError)
        sim.restart(0)
        sim.restart(1)
        time.sleep(0.3)
        results_ok(fleet.run([prompt_request(i) for i in range(1, 6)]))  # half-open probes get through


def test_server_errors_on_a_probe_keep_the_breaker_honest():
    with simulated_fleet(2, time_scale=0.05, breaker_failures=2, breaker_cooldown_s=0.2) as (sim, fleet):
        sim.set_faults(1, error_rate=1.0)
        results_ok(fleet.run([prompt_request(i) for i in range(20)]))
        broken = fleet.replicas[1]
        assert broken.breaker.trips >= 1 and "HTTP 500" in broken.last_error
        sim.set_faults(1, error_rate=0.0)
        time.sleep(0.3)
        results = results_ok(fleet.run([prompt_request(i) for i in range(20, 60)]))
        assert any(r.replica == sim.base_urls[1] for r in results), "a 5xx probe does not blacklist for good"


def test_openai_embeddings_endpoint():
    from contextual_assets.embedding import OpenAIEmbedder

    with FleetSimulator([ReplicaSpec(serve_embeddings=True)], time_scale=0.05) as sim:
        embedder = OpenAIEmbedder(sim.base_urls[0], "sim-embed", batch_size=3)
        vectors = embedder.embed([f"text {i}" for i in range(7)])
        assert len(vectors) == 7 and embedder.dimension == 32 and embedder.identity == "openai:sim-embed"
        assert embedder.embed(["text 3"])[0] == vectors[3], "order kept across batches"
        # A server that serves no embeddings (404): a configuration error naming the settings to check.
        wrong = OpenAIEmbedder(sim.base_urls[0] + "/nothing-here", "sim-embed")
        with pytest.raises(ConfigurationError, match="HTTP 404.*CTX_EMBED_BASE_URL and CTX_EMBED_MODEL"):
            wrong.embed(["text"])


def test_openai_embeddings_endpoint_down_is_a_dependency_error_after_retries():
    from contextual_assets.embedding import EmbedderUnavailable, OpenAIEmbedder

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "sim-embed")
    embedder.RETRIES = 1
    with pytest.raises(EmbedderUnavailable, match=r"/v1/embeddings failed 2 times \(last: ConnectError"):
        embedder.embed(["text"])


# ---- hedged requests and fleet-wide signals -------------------------------------------------------

def warm_up(fleet: HeaderFleet, n: int = 48) -> None:
    """Enough answers on every replica for a latency percentile (hedging has no basis before)."""
    results_ok(fleet.run([prompt_request(1000 + i, words=100) for i in range(n)]))


def test_tail_hedge_first_answer_wins_and_the_loser_is_cancelled():
    with simulated_fleet([ReplicaSpec(), ReplicaSpec()], time_scale=0.2, cap=4, hedge_min_s=0.2,
                         metrics_interval_s=0) as (sim, fleet):
        warm_up(fleet)
        assert min(len(s.latency_samples) for s in fleet.replicas) >= 20
        sim.set_faults(1, slowdown=50.0)  # replica 1 degrades: its answers now take 50x longer
        results = results_ok(fleet.run([prompt_request(i, words=100) for i in range(2)]))
        assert fleet.counters.hedges == 1 and fleet.counters.hedge_wins == 1
        won = [r for r in results if r.hedge_won]
        assert len(won) == 1 and won[0].hedged and won[0].replica == sim.base_urls[0]  # the first answer
        assert all(r.replica == sim.base_urls[0] for r in results)
        deadline = time.monotonic() + 5
        while sim.stats()[1]["aborted"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim.stats()[1]["aborted"] == 1  # the slow copy was cancelled at the replica, not left running
        assert all(s.in_flight == 0 for s in fleet.replicas)


def test_no_hedge_while_requests_are_queued_for_a_slot():
    with simulated_fleet([ReplicaSpec(), ReplicaSpec()], time_scale=0.2, cap=2, hedge_min_s=0.2,
                         metrics_interval_s=0) as (sim, fleet):
        warm_up(fleet)
        hedges_before = fleet.counters.hedges
        results_ok(fleet.run([prompt_request(i, words=100) for i in range(40)]))  # 4 slots, 40 requests
        # Evenly fast replicas and a queue until the last 4: at most the final wave may be hedged.
        assert fleet.counters.hedges - hedges_before <= 4


def test_a_stalled_replica_requests_are_sent_again_long_before_their_timeout():
    specs = [ReplicaSpec(), ReplicaSpec(), ReplicaSpec(faults={"stall_s": 600.0})]
    with simulated_fleet(specs, time_scale=0.1, cap=4, hedge_min_s=0.2, request_timeout_s=60.0,
                         metrics_interval_s=0) as (sim, fleet):
        started = time.monotonic()
        results = results_ok(fleet.run([prompt_request(i, words=100) for i in range(80)]))
        elapsed = time.monotonic() - started
        assert all(r.replica != sim.base_urls[2] for r in results)
        assert fleet.counters.hedges >= 4 and fleet.counters.hedge_wins >= 4  # the first wave's 4 at least
        assert not any("Timeout" in kind for kind in fleet.counters.errors)  # nobody waited for a timeout
        assert elapsed < fleet.config.request_timeout_s


def test_a_hedge_with_nowhere_to_go_leaves_no_task_behind():
    """One replica: every hedge the monitor grants finds no other replica. Nothing may be left waiting
    in the pool's event loop after the answer (a leak per grant, for the life of the pool, before)."""
    with simulated_fleet([ReplicaSpec()], time_scale=0.2, cap=4, hedge_min_s=0.2, metrics_interval_s=0) as (sim, fleet):
        warm_up(fleet, n=24)
        sim.set_faults(0, slowdown=20.0)
        started = time.monotonic()
        results_ok(fleet.run([prompt_request(1, words=100)]))
        assert time.monotonic() - started > 1.0  # slow enough for the monitor to grant hedges (every 0.2 s)
        assert fleet.counters.hedges == 0  # granted, but there was nowhere to send one

        async def pending_event_waits() -> list:
            return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Event.wait"]

        assert asyncio.run_coroutine_threadsafe(pending_event_waits(), fleet._loop).result(timeout=5) == []


def test_hedges_never_exceed_their_budget():
    specs = [ReplicaSpec(), ReplicaSpec(), ReplicaSpec(faults={"stall_s": 600.0})]
    with simulated_fleet(specs, time_scale=0.1, cap=4, hedge_min_s=0.2, request_timeout_s=4.0,
                         hedge_budget_min=2, hedge_budget_ratio=0.0, metrics_interval_s=0) as (sim, fleet):
        results_ok(fleet.run([prompt_request(i, words=100) for i in range(60)]))
        assert fleet.counters.hedges == 2  # two stalled requests re-sent; the rest waited for their timeout
        assert fleet.counters.errors.get("APITimeoutError", 0) >= 1


def _peak_in_system(sim: FleetSimulator, stop, peaks: list[int]) -> None:
    while not stop.is_set():
        for i, s in enumerate(sim.stats()):
            peaks[i] = max(peaks[i], s["running"] + s["waiting"])
        time.sleep(0.01)


@pytest.mark.parametrize("signals", [True, False])
def test_two_pools_sharing_a_fleet_count_each_other_against_the_caps(signals):
    """Two request pools (as two ingest processes would have), started at the same moment on one
    fleet: with the replicas' own /metrics each pool sees the other's requests (and both start at half
    the cap until the replica has counted theirs), so a replica holds about its cap, not twice it, and
    answers in proportion to its speed."""
    import threading

    cap = 8
    specs = [ReplicaSpec(max_num_seqs=cap), ReplicaSpec(max_num_seqs=cap, speed=0.5)]
    with FleetSimulator(specs, time_scale=1.0) as sim:
        config = FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=cap) for u in sim.base_urls],
                             metrics_interval_s=0.1 if signals else 0, hedge=False)
        pools = [HeaderFleet(config, discovery=ModelDiscovery()) for _ in range(2)]
        peaks, stop = [0, 0], threading.Event()
        watcher = threading.Thread(target=_peak_in_system, args=(sim, stop, peaks))
        watcher.start()

        def run(k: int):
            return pools[k].run([prompt_request(k * 1000 + i, words=150) for i in range(60)])

        try:
            with concurrent.futures.ThreadPoolExecutor(2) as runner:
                for job in [runner.submit(run, k) for k in range(2)]:
                    results_ok(job.result())
        finally:
            stop.set()
            watcher.join()
            for p in pools:
                p.close()
        completed = [s["completed"] for s in sim.stats()]
    if signals:
        # A read is up to 0.1 s old against answers of about a second, and on a loaded machine the
        # replica counts a request late: a few slots may overlap, never the other pool's whole share.
        assert max(peaks) <= cap + cap // 2, peaks
        assert completed[0] > 1.5 * completed[1], completed  # shares follow speed (2:1)
    else:
        assert max(peaks) >= 2 * cap - 2, peaks  # each pool alone fills every replica to its own cap
