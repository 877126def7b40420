"""bench.ingest's skewed, stream and shared-fleet workloads: their corpora, the pure figures of the
stream (waves, run boundaries), the model floor of a corpus, and shared-fleet end to end on a tiny
corpus (two `ctx ingest` processes, Postgres, the simulator). The stream's platform mode needs a
webserver, a daemon and the sensor's 15 s interval, so it is left to the bench itself."""

from __future__ import annotations

import statistics

import pytest

from bench import ingest, ingest_options
from bench.ingest_workloads import SHARED_FLEET_DOCUMENTS_PER_PROCESS, WORKLOAD_OPTIONS
from bench.oracle_floor import oracle_floor
from bench.sim import ReplicaSpec


def chunk_counts(paths) -> list[int]:
    docs, _, _ = ingest.corpus_chunks(paths)
    return [len(d.chunks) for d in docs]


def test_skewed_has_one_document_15x_the_median_sorting_last(tmp_path):
    paths = ingest.build_skewed(tmp_path / "a")
    assert len(paths) == 40
    counts = dict(zip((p.name for p in paths), chunk_counts(paths)))
    last = sorted(counts)[-1]
    assert last.startswith("zz_") and counts[last] == max(counts.values())
    others = [c for name, c in counts.items() if name != last]
    assert counts[last] >= 15 * statistics.median(counts.values())
    assert max(others) <= 2 * min(others)  # the others are of a size
    again = ingest.build_skewed(tmp_path / "b")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]  # seeded


def test_stream_and_shared_fleet_corpora(tmp_path):
    stream = ingest.build_stream(tmp_path / "stream", documents=60)
    counts = chunk_counts(stream)
    assert len(stream) == 60 and all(p.suffix == ".md" for p in stream)
    assert min(counts) >= 1 and max(counts) <= 12 and len(set(counts)) >= 3  # small to medium, mixed
    shared = ingest.build_shared_fleet(tmp_path / "shared", documents=7)
    assert [f.name for f in ingest.corpus_halves(shared)] == ["a", "b"]
    assert sorted(len(list(f.iterdir())) for f in ingest.corpus_halves(shared)) == [3, 4]
    assert ingest.workload_speeds("shared-fleet") == (1.0, 1.0, 0.6, 0.4)
    assert ingest.workload_speeds("stream") == ingest.SPEEDS


def test_wave_batches_keep_order_and_sizes():
    paths = list(range(10))
    batches = ingest.wave_batches(paths, 4)
    assert [x for batch in batches for x in batch] == paths
    assert sorted(len(batch) for batch in batches) == [2, 2, 3, 3]
    assert ingest.wave_batches(paths[:2], 8) == [[0], [1]]


def timeline_of(started: float, running: dict[str, list[tuple[float, float]]]):
    """A sampled /metrics timeline: per replica, (time, running) samples."""
    from contextual_assets.fleet.metrics_timeline import MetricsTimeline

    timeline = MetricsTimeline(started=started)
    for replica, samples in running.items():
        timeline.samples[replica] = [(t, {"running": n}) for t, n in samples]
    return timeline


def test_idle_time_counts_each_replica_with_nothing_running_while_work_is_pending():
    # Two replicas sampled every second: a idle over [2, 4), b idle over [3, 4).
    timeline = timeline_of(0.0, {"a": [(0, 5), (1, 5), (2, 0), (3, 0), (4, 5), (5, 5)],
                                 "b": [(0, 5), (1, 5), (2, 5), (3, 0), (4, 5), (5, 5)]})
    # 3 replica-seconds idle over two replicas: 1.5 fleet-seconds. A second with an admission in it
    # (b at 4) does not make the seconds before it busy.
    assert ingest.idle_time(timeline, 0.0, 5.0) == {"idle_while_pending_s": 1.5, "pending_span_s": 5.0}
    assert ingest.idle_time(timeline, 2.5, 3.5)["idle_while_pending_s"] == 0.75  # clipped to the window


def test_run_boundaries_count_idle_time_inside_gaps():
    # Wall time = monotonic + 100; runs commit over [100, 104], [107, 110] and [110.5, 112].
    timeline = timeline_of(0.0, {"a": [(t, 0 if t in (5, 6) else 8) for t in range(13)]})
    out = ingest.run_boundaries([(107, 110), (100, 104), (110.5, 112)], timeline, offset=100.0, t0=99.0)
    # Gap 104-107 (monotonic 4-7): the replica ran nothing over [5, 7).
    assert out == [{"after_s": 5.0, "gap_s": 3.0, "idle_while_pending_s": 2.0},
                   {"after_s": 11.0, "gap_s": 0.5, "idle_while_pending_s": 0.0}]


def test_utilization_is_engine_busy_time_over_the_wall():
    result = ingest.with_utilization({"wall_s": 10.0, "sim_busy_s": [4.0, 2.0], "sim_seq_s": [40.0, 20.0]}, 2.0)
    # (4 + 2) simulated seconds x 2 real seconds each, over 2 replicas x 10 s of wall.
    assert result["utilization"] == 0.6
    assert result["mean_batch"] == 10.0
    assert result["mean_batch_occupancy"] == round(10.0 / ingest_options.OPTIONS.max_num_seqs, 4)


def test_median_interval_brackets_the_median():
    low, high = ingest.median_interval([1.0, 1.1, 1.2, 1.3, 5.0])
    assert low <= 1.2 <= high and low >= 1.0 and high <= 5.0
    assert ingest.median_interval([1.0]) == (None, None)


def test_model_floor_of_a_corpus(tmp_path):
    paths = ingest.build_stream(tmp_path, documents=5)
    docs, counter, settings = ingest.corpus_chunks(paths)
    one = ingest.model_floor(docs, counter, settings, time_scale=1.0)
    assert one["model_requests"] == sum(len(d.chunks) for d in docs)
    assert one["model_floor_s"] > 0
    # Both figures are rounded to 3 decimals.
    assert one["model_floor_s"] == pytest.approx(one["model_work_s"] / sum(ingest.SPEEDS), abs=2e-3)
    slower = ingest.model_floor(docs, counter, settings, time_scale=2.0, speeds=(1.0,))
    assert slower["model_floor_s"] == pytest.approx(one["model_work_s"] * 2, abs=2e-3)
    result = ingest.with_model_floor({"wall_s": 3.0}, {"model_floor_s": 2.0, "oracle_floor_s": 2.5})
    assert result == {"wall_s": 3.0, "model_floor_s": 2.0, "wall_over_model_floor": 1.5,
                      "oracle_floor_s": 2.5, "wall_over_oracle": 1.2}


def test_oracle_floor_of_a_corpus_respects_arrivals(tmp_path):
    """The reachable floor is above the model floor, and a corpus whose files arrive late cannot finish
    before the last one arrives."""
    paths = ingest.build_stream(tmp_path, documents=8)
    docs, counter, settings = ingest.corpus_chunks(paths)
    model = ingest.model_floor(docs, counter, settings, time_scale=1.0)
    at_once = ingest.oracle_figures(docs, counter, settings, time_scale=1.0)
    assert model["model_floor_s"] <= at_once["oracle_floor_s"] < 20 * model["model_floor_s"]
    late = {doc.doc_id: 5.0 * i for i, doc in enumerate(docs)}
    streamed = ingest.oracle_figures(docs, counter, settings, time_scale=1.0, doc_arrivals=late)
    assert streamed["oracle_floor_s"] > 5.0 * (len(docs) - 1)


def test_shared_fleet_two_processes_on_one_fleet(tmp_path):
    paths = ingest.build_shared_fleet(tmp_path / "corpus", documents=6, paragraphs=2)  # a few chunks each
    expected = sum(chunk_counts(paths))
    result = ingest.run_shared_fleet(tmp_path, 0.5, paths, expected)
    assert (result["documents"], result["chunks"]) == (6, expected)
    assert len(result["process_wall_s"]) == 2 and result["wall_s"] == max(result["process_wall_s"])
    assert result["process_documents"] == [3, 3]
    assert result["requests"] == expected  # every header once, none lost or repeated
    assert result["capacity_share"] == [0.3333, 0.3333, 0.2, 0.1333]
    assert sum(result["replica_share"]) == pytest.approx(1, abs=1e-3)
    assert len(result["peak_open_requests"]) == 4 and result["cap"] is None  # no ceiling configured
    assert result["peak_over_cap"] is None


def test_shared_fleet_gives_each_process_30_s_of_fleet_work(tmp_path):
    """The default corpus: every process's part is >= 30 s of model-floor work on the shared fleet at
    time scale 1 (~2 s before: too little for the shares to settle). Estimated from every 4th
    document of a part (the documents are drawn alike and the floor's sums grow with the corpus; the
    full part a: 33.0 s)."""
    paths = ingest.build_shared_fleet(tmp_path)
    parts = ingest.corpus_halves(paths)
    assert len(parts) == ingest_options.OPTIONS.processes == 2
    for part in parts:
        mine = sorted(p for p in paths if p.parent == part)
        assert len(mine) == SHARED_FLEET_DOCUMENTS_PER_PROCESS
        sample = mine[::4]
        docs, counter, settings = ingest.corpus_chunks(sample)
        floor = ingest.model_floor(docs, counter, settings, 1.0, ingest.workload_speeds("shared-fleet"))
        assert floor["model_floor_s"] * len(mine) / len(sample) >= 30.0


def test_fleet_work_per_process_splits_the_corpus_by_folder(tmp_path):
    paths = ingest.build_shared_fleet(tmp_path, documents=4, paragraphs=6)
    docs, counter, settings = ingest.corpus_chunks(paths)
    speeds = ingest.workload_speeds("shared-fleet")
    parts = ingest.fleet_work_per_process(docs, counter, settings, 1.0, speeds)
    whole = ingest.model_floor(docs, counter, settings, 1.0, speeds)["model_floor_s"]
    assert len(parts) == 2 and all(p > 0 for p in parts)
    assert sum(parts) == pytest.approx(whole, rel=0.05)  # the parts share no prefix


def test_two_engine_replicas_have_the_floor_of_twice_as_many_single_engine_ones(tmp_path, monkeypatch):
    paths = ingest.build_stream(tmp_path, documents=6)
    docs, counter, settings = ingest.corpus_chunks(paths)
    monkeypatch.setattr(ingest_options, "OPTIONS", ingest.BenchOptions(engines=2))
    two = ingest.model_floor(docs, counter, settings, 1.0, ingest.SPEEDS)
    monkeypatch.setattr(ingest_options, "OPTIONS", ingest.BenchOptions(engines=1))
    single = ingest.model_floor(docs, counter, settings, 1.0, tuple(s for s in ingest.SPEEDS for _ in range(2)))
    one = ingest.model_floor(docs, counter, settings, 1.0, ingest.SPEEDS)
    assert two == single
    assert two["model_floor_s"] == pytest.approx(one["model_floor_s"] / 2, abs=2e-3)  # twice the capacity


def test_kv_stress_prompts_overflow_the_kv_pool_and_preempt(tmp_path, monkeypatch):
    """kv-stress's header prompts: 256 of them need far more KV than its replicas hold, and one engine
    given a small sample at once preempts; the same requests on the default A100 pool do not. The
    workload's spec is the one the simulator, the model floor and the oracle floor all get."""
    options = ingest.BenchOptions(**WORKLOAD_OPTIONS["kv-stress"])
    monkeypatch.setattr(ingest_options, "OPTIONS", options)
    assert ingest.WORKLOADS["kv-stress"] is ingest.build_kv_stress
    spec = options.sim_spec()
    assert spec.kv_cache_tokens == WORKLOAD_OPTIONS["kv-stress"]["kv_cache_tokens"] < ReplicaSpec().max_model_len
    docs, counter, settings = ingest.corpus_chunks(ingest.build_kv_stress(tmp_path, documents=2))
    assert settings.context_tokens == WORKLOAD_OPTIONS["kv-stress"]["context_tokens"]
    bodies, documents = ingest.corpus_bodies(docs, counter, settings)
    floor = ingest.model_floor(docs, counter, settings, 1.0)
    mean_prompt = floor["model_prompt_tokens"] / floor["model_requests"]
    assert mean_prompt > 3000 and 256 * mean_prompt > 10 * spec.kv_cache_tokens
    one_engine = oracle_floor(bodies, [1.0], 1.0, spec, documents=documents, policies=["documents"], rounds=1)
    assert one_engine["oracle_rejected"] == 0 and one_engine["oracle_preemptions"] > 0
    a100 = oracle_floor(bodies, [1.0], 1.0, ReplicaSpec(), documents=documents, policies=["documents"], rounds=1)
    assert a100["oracle_preemptions"] == 0
    assert ingest.fleet_settings(type("Sim", (), {"base_urls": ["http://x"]})())["CTX_CONTEXT_TOKENS"] == "4000"


class FakeSim:
    """A fleet whose `stats()` is given (what `SimFleet.stats` reads from the simulator's process)."""

    def __init__(self, stats: list[dict]):
        self._stats = stats

    def stats(self) -> list[dict]:
        return self._stats


def test_fleet_figures_record_the_simulators_lag_and_the_mode_is_marked():
    from bench.sim_validity import with_sim_validity

    # Replica 1's engine was busy 0.3 s of wall beyond its 4 simulated seconds at time scale 2.
    stats = [{"completed": 10, "busy_s": 4.0, "busy_wall_s": 8.0 + lag, "prompt_tokens": 100, "base_url": f"u{i}",
              "max_lag_s": lag, "reanchors": i} for i, lag in enumerate((0.01, 0.3, 0.02, 0.0))]
    figures = ingest.fleet_figures(FakeSim(stats), timeline_of(0.0, {}), ingest.SPEEDS, time_scale=2.0)
    assert figures["sim_max_lag_s"] == 0.3 and figures["sim_reanchors"] == 6 and figures["sim_lost_s"] == 0.3
    assert figures["work_share_error"] is not None
    assert with_sim_validity({"wall_s": 10.0, **figures})["sim_valid"] is False  # 0.3 s > max(0.05, 0.2)
    assert with_sim_validity({"wall_s": 20.0, **figures})["sim_valid"] is True  # 0.3 s <= 2 % of 20 s
