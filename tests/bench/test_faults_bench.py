"""A fast subset of the fault-injection bench (bench/faults.py) on tiny corpora: real `ctx ingest`
runs against the fleet simulator with a replica killed, 5xx answers, malformed answers, and the same
document submitted twice at once. Each scenario must hold every check: nothing lost, no duplicates,
no partial document, no bad header stored."""

from __future__ import annotations

import pytest

from bench import faults


@pytest.mark.parametrize("name, kwargs", [
    ("replica_killed", {"n_docs": 4}),
    ("errors_5xx", {"n_docs": 3}),
    ("malformed", {"n_docs": 1, "modes": ("echo", "bad_json")}),
    ("same_document_twice", {}),
])
def test_fault_scenario(name, kwargs, tmp_path):
    result = faults.run_scenario(name, tmp_path, **kwargs)
    assert result.passed, result.detail
    assert result.chunks_lost == 0, result.detail
    assert result.duplicates == 0, result.detail
    assert result.chunks_committed == result.chunks_expected, result.detail
