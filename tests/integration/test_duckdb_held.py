"""A long-lived reader (the search service) holds its DuckDB connection across requests, and gives the
file to another process that asks for it: a writer in another process commits while the reader keeps
answering, and the reader's next request sees the commit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from contextual_assets.store import open_store
from tests.integration.test_store_contract import put

REPO = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from contextual_assets.store import open_store
from tests.integration.test_store_contract import put
store = open_store(None, sys.argv[1])
put(store, "harbour.txt", ["the harbour tariff is paid in ducats"])
store.close()
"""


def wait_until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_the_held_connection_outlives_requests_and_is_handed_to_a_writer(tmp_path):
    path = tmp_path / "index.duckdb"
    seed = open_store(None, path)
    put(seed, "mooring.txt", ["the mooring fee is paid in florins"])
    seed.close()

    reader = open_store(None, path)
    reader.backend.hold_connection(idle_release_s=3600)  # never idle here: only a request for the file frees it
    held = reader.backend._held
    with reader.reading():
        assert reader.search.lexical("mooring florins", "iv-a", 1)[0].doc_id == "mooring.txt"
    assert held.is_open  # still open after the request

    answers, errors = [], []
    stop = threading.Event()

    def keep_searching() -> None:
        while not stop.is_set():
            try:
                with reader.reading():
                    answers.append(reader.search.lexical("mooring florins", "iv-a", 1)[0].doc_id)
            except Exception as exc:  # noqa: BLE001 - collected, asserted below
                errors.append(exc)

    searcher = threading.Thread(target=keep_searching)
    searcher.start()
    try:
        wait_until(lambda: len(answers) >= 3)
        writer = subprocess.run([sys.executable, "-c", WRITER, str(path)], cwd=REPO, capture_output=True,
                                text=True, timeout=300)
        assert writer.returncode == 0, writer.stderr[-2000:]
        before = len(answers)
        wait_until(lambda: len(answers) >= before + 3)  # answering again after the hand-over
    finally:
        stop.set()
        searcher.join()
    assert not errors
    assert set(answers) == {"mooring.txt"}
    with reader.reading():
        assert reader.search.lexical("harbour ducats", "iv-a", 1)[0].doc_id == "harbour.txt"
    assert held.is_open
    reader.close()
    assert not held.is_open


def test_an_idle_held_connection_is_released(tmp_path):
    path = tmp_path / "index.duckdb"
    store = open_store(None, path)
    put(store, "mooring.txt", ["the mooring fee is paid in florins"])
    store.backend.hold_connection(idle_release_s=0.2)
    with store.reading():
        assert store.search.lexical("mooring", "iv-a", 1)
    assert store.backend._held.is_open
    wait_until(lambda: not store.backend._held.is_open)
    store.close()
