"""bench.ingest's skewed, stream and shared-fleet workloads: their corpora, the pure figures of the
stream (waves, run boundaries), the model floor of a corpus, and shared-fleet end to end on a tiny
corpus (two `ctx ingest` processes, Postgres, the simulator). The stream's platform mode needs a
webserver, a daemon and the sensor's 15 s interval, so it is left to the bench itself."""

from __future__ import annotations

import statistics

import pytest

from bench import ingest


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
    assert result["mean_batch_occupancy"] == round(10.0 / ingest.OPTIONS.max_num_seqs, 4)


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
    paths = ingest.build_shared_fleet(tmp_path / "corpus", documents=6)
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
