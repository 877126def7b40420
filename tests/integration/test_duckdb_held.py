"""A long-lived reader (the search service) holds its DuckDB connection across requests, and gives the
file to another process that asks for it: a writer in another process commits while the reader keeps
answering, and the reader's next request sees the commit. Two ingest steps that each hold the file
(`Backend.holding`) while they write hand it to each other and both finish."""

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
# One ingest step's writes: many small transactions (documents, header cache rows) inside `holding()`.
HOLDING_WRITER = """
import sys, time
from pathlib import Path
from contextual_assets.store import open_store
from tests.integration.test_store_contract import put
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(None, path)
Path(path + "." + name + ".ready").touch()
while len(list(Path(path).parent.glob("*.ready"))) < 2:  # both start writing together
    time.sleep(0.01)
done = []
with store.backend.holding():
    for i in range(n):
        put(store, f"{name}-{i}.txt", [f"{name} clause {i} on demurrage"])
        store.header_cache.cache_headers([(f"{name}-{i}", f"header {i}", "m")])
        assert store.header_cache.cached_headers([f"{name}-{i}"]) == {f"{name}-{i}": f"header {i}"}
        assert store.backend._held is not None  # still holding (the connection itself may be handed over)
        done.append(time.time())
print("done", done[0], done[-1], flush=True)
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


def test_two_holding_writers_hand_the_file_to_each_other(tmp_path):
    path = tmp_path / "index.duckdb"
    open_store(None, path).close()  # migrated once, before both start
    n = 40
    writers = [subprocess.Popen([sys.executable, "-c", HOLDING_WRITER, str(path), name, str(n)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("ebb", "flood")]
    spans = []
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0 and "done" in out, err[-2000:]
        spans.append([float(x) for x in out.split()[1:3]])
    # Interleaved: each committed a document before the other's last one (a holder that kept the file
    # until its step ended would make the other wait for all of it).
    assert max(first for first, _ in spans) < min(last for _, last in spans), spans
    store = open_store(None, path)  # both let go: this process gets the file at once
    assert sorted(d.doc_id for d in store.corpus.documents("iv-a")) == sorted(
        f"{name}-{i}.txt" for name in ("ebb", "flood") for i in range(n))
    cache_keys = [f"{name}-{i}" for name in ("ebb", "flood") for i in range(n)]
    assert len(store.header_cache.cached_headers(cache_keys)) == 2 * n
    store.close()


def test_holding_releases_the_file_at_its_end(tmp_path):
    path = tmp_path / "index.duckdb"
    store = open_store(None, path)
    opens = []
    with store.backend.holding():
        held = store.backend._held
        open_connection = held._open
        held._open = lambda: opens.append(1) or open_connection()
        for i in range(20):
            put(store, f"mooring-{i}.txt", [f"the mooring fee {i} is paid in florins"])
            store.header_cache.cache_headers([(f"mooring-{i}", f"header {i}", "m")])
            assert store.header_cache.cached_headers([f"mooring-{i}"]) == {f"mooring-{i}": f"header {i}"}
        # Far fewer opens than the 60 transactions and reads (only an idle gap over 0.5 s, i.e. a stalled
        # machine, would reopen).
        assert 1 <= len(opens) <= 10, len(opens)
    assert store.backend._held is None and not held.is_open
    writer = subprocess.run([sys.executable, "-c", WRITER, str(path)], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert writer.returncode == 0, writer.stderr[-2000:]
    assert {d.doc_id for d in store.corpus.documents("iv-a")} == {f"mooring-{i}.txt" for i in range(20)} | {
        "harbour.txt"}
    store.close()


def test_a_thread_holding_a_cursor_gets_another_while_the_file_is_asked_for(tmp_path):
    """A transaction inside a request's reads (e.g. indexing a pre-migration document during a search)
    takes a second cursor on the same thread; a drain that starts in between must not wait for it."""
    path = tmp_path / "index.duckdb"
    store = open_store(None, path)
    put(store, "mooring.txt", ["the mooring fee is paid in florins"])
    store.backend.hold_connection(idle_release_s=3600)
    held = store.backend._held
    answers = []

    def request() -> None:
        with store.reading():
            held._draining = True  # as the watcher sets it when another process asks
            with store.backend.transaction() as cur:  # would wait forever for this thread's own reads
                cur.execute("SELECT 1")
            answers.append(store.search.lexical("mooring florins", "iv-a", 1)[0].doc_id)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "a nested cursor waited for its own thread's drain"
    assert answers == ["mooring.txt"]
    wait_until(lambda: not held.is_open)  # the last cursor out closed it, as asked
    store.close()
