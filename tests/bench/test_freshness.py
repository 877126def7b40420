"""bench.freshness: its percentiles, the per-drop breakdown, the dropped documents (written atomically,
parsed by the platform into a chunk that holds the token), and the bench end to end on two drops (a
real webserver, daemon and sensor with the default interval and settle time: about a minute)."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from bench import freshness


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], [float(x) for x in range(1, 11)],
                                    [12.5, 7.25, 30.0, 9.0, 10.1, 8.8, 14.0]])
@pytest.mark.parametrize("q", [0, 50, 95, 100])
def test_percentile_matches_numpys_linear_interpolation(values, q):
    assert freshness.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_none():
    assert freshness.percentile([], 50) is None


def test_summary_skips_failed_drops_but_keeps_them_in_values():
    summary = freshness.summarize([10.0, None, 12.0, 20.0])
    assert summary["p50"] == 12.0
    assert summary["p95"] == pytest.approx(19.2)
    assert summary["max"] == 20.0
    assert summary["values"] == [10.0, None, 12.0, 20.0]
    assert summary["failed"] == 1
    assert freshness.summarize([None]) == {"p50": None, "p95": None, "max": None, "values": [None], "failed": 1}


def test_tick_gaps_count_those_where_the_sensor_loop_skipped_a_tick():
    ticks = freshness.gap_summary([5.0, 9.99, 5.0, 5.01, 10.01], interval_s=5)
    assert ticks["p50"] == 5.01 and ticks["max"] == 10.01 and ticks["over_interval"] == 2
    assert "failed" not in ticks and ticks["values"] == [5.0, 9.99, 5.0, 5.01, 10.01]
    assert freshness.gap_summary([], interval_s=5)["over_interval"] == 0


def test_breakdown_is_seconds_after_the_drop_with_missing_phases_none():
    dropped = 1_700_000_000.0
    times = {"run_id": "r1", "tick": dropped + 5.123, "created": dropped + 5.6, "launched": dropped + 6.0,
             "started": dropped + 8.5, "committed": None, "searchable": dropped + 9.004}
    assert freshness.breakdown(dropped, times) == {"tick": 5.12, "created": 5.6, "launched": 6.0, "started": 8.5,
                                                   "committed": None, "searchable": 9.0}
    assert freshness.breakdown(dropped, {}) == dict.fromkeys(freshness.PHASES)


def test_tokens_are_seeded_words_of_four_letters_and_four_digits():
    tokens = [freshness.unique_token(random.Random(7)) for _ in range(2)]
    assert tokens[0] == tokens[1]
    rng = random.Random(1)
    many = [freshness.unique_token(rng) for _ in range(50)]
    assert all(re.fullmatch(r"[a-z]{4}\d{4}", t) for t in many)
    assert len(set(many)) == 50


def test_dropped_document_holds_the_token_and_parses_into_a_chunk_with_it(tmp_path):
    from contextual_assets.ingest.inbox.document_keys import partition_key_for
    from contextual_assets.ingest.pipeline.parse import parse_document
    from contextual_assets.parsing.tokens import token_counter
    from contextual_assets.settings import PlatformSettings

    text = freshness.document_text("Freshness note 1", "zqxv1234", random.Random(0))
    assert text.startswith("# Freshness note 1") and text.count("\n## ") == 2 and text.count("zqxv1234") == 1
    dropped_at = freshness.drop_document(tmp_path, "fresh_001.md", text)
    assert [p.name for p in tmp_path.iterdir()] == ["fresh_001.md"]  # the hidden name is gone
    assert (tmp_path / "fresh_001.md").read_text() == text and dropped_at > 0
    doc = parse_document(partition_key_for("fresh_001.md"), tmp_path / "fresh_001.md", token_counter(),
                         chunk_tokens=PlatformSettings().chunk_tokens, max_bytes=10**7, max_pdf_pages=10)
    assert doc.title == "Freshness note 1"
    assert [c for c in doc.chunks if "zqxv1234" in c.text]


def test_two_drops_become_searchable_end_to_end(tmp_path):
    from contextual_assets.settings import PlatformSettings

    out = tmp_path / "freshness.json"
    assert freshness.main(["--drops", "2", "--json", str(out), "--workdir", str(tmp_path / "work")]) == 0
    result = json.loads(out.read_text())
    assert result["drops"] == 2 and result["headers"] == "structural" and result["embedder"] == "remote"
    figures = result["drop_to_searchable_s"]
    assert figures["failed"] == 0 and len(figures["values"]) == 2 and all(v > 0 for v in figures["values"])
    assert 0 < figures["p50"] <= figures["p95"] <= figures["max"] <= freshness.SEARCH_TIMEOUT_S
    defaults = {name: PlatformSettings.default(name) for name in ("inbox_interval_s", "inbox_settle_s")}
    assert result["settings"] == {**defaults, "defaults": defaults, "overridden": False}
    assert result["machine"]
    ticks = result["sensor_tick_gaps_s"]
    # The sensor ticked all along, never faster than its interval (a tick starts within Dagster's loop).
    assert len(ticks["values"]) >= 4 and min(ticks["values"]) >= defaults["inbox_interval_s"] - 0.5
    for entry, value in zip(result["breakdown"], figures["values"]):
        assert entry["run_id"] and entry["searchable"] == value == entry["drop_to_searchable_s"]
        phases = [entry[p] for p in ("tick", "created", "launched", "started", "committed")]
        assert all(p is not None for p in phases), entry
        # The file is only taken once it has settled (judged on the tick's clock, read a moment after the
        # tick's recorded start); then each phase follows the one before.
        assert entry["tick"] >= defaults["inbox_settle_s"] - 0.5 and phases == sorted(phases), entry
