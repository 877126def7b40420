"""A FIFO, socket or device never hangs `ctx ingest`: named on the command line (`ctx ingest inbox/*` can
name one) or met while walking a folder, it is refused from its mode, at once and never opened (opening a
FIFO for reading waits for a writer, for ever), with one line naming the path and why; the other files of
the call are ingested and the exit code is 1 ("some documents failed or were refused"). Through the real
CLI in a subprocess, on DuckDB and on Postgres; the subprocess's timeout is only a hang guard."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT, run_ctx

HANG_GUARD_S = 300  # a two-document ingest on a loaded machine takes well under this; a hang never ends


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_fifo_and_socket_are_refused_at_once_and_the_rest_is_ingested(backend, tmp_path, env, request):
    if backend == "postgres":
        env = {**env, "DATABASE_URL": request.getfixturevalue("pg_url")}
    named_fifo = tmp_path / "incoming.md"
    os.mkfifo(named_fifo)
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe harbour crane was serviced on Tuesday by the night shift.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "crane.md").write_text("# Crane\n\nThe crane lifts at most 40 tonnes in a crosswind.\n")
    folder_fifo = docs / "queue.txt"
    os.mkfifo(folder_fifo)
    # A socket file in the folder (bound, then the socket closed: the file stays, a socket by its mode).
    folder_socket = docs / "control.md"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder_socket))

    try:
        ingest = subprocess.run(
            [sys.executable, "-m", "contextual_assets.cli.main", "ingest", str(named_fifo), str(notes), str(docs),
             "--json"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`ctx ingest` hung on a FIFO for {HANG_GUARD_S} s; stderr: {str(exc.stderr)[-2000:]}")

    assert ingest.returncode == 1, ingest.stderr[-3000:]  # refused files: exit code 1
    lines = ingest.stderr.splitlines()
    for path, kind in [(named_fifo, "a named pipe (FIFO)"), (folder_fifo, "a named pipe (FIFO)"),
                       (folder_socket, "a socket")]:
        about = [line for line in lines if str(path) in line]
        assert about == [f"skipped: {path}: {kind}, not a regular file; refused without opening it"], \
            ingest.stderr[-3000:]
    outcomes = {o["key"]: o for o in json.loads(ingest.stdout)}
    assert set(outcomes) == {"notes.md", "docs/crane.md"}, outcomes
    assert all(o["success"] and o["chunks"] > 0 for o in outcomes.values()), outcomes

    status = json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    versions = {v["index_version"]: v for v in status["index_versions"]}
    assert versions[status["current_index_version"]]["documents"] == 2, status
    hits = json.loads(run_ctx(env, "search", "crane crosswind tonnes", "--json", "-k", "1", check=True).stdout)["hits"]
    assert "40 tonnes" in hits[0]["text"]


def test_only_a_fifo_named_is_refused_without_running_anything(tmp_path, env):
    """Nothing left to ingest: one line for the FIFO, 'nothing to ingest', exit code 1, at once."""
    named_fifo = tmp_path / "incoming.pdf"
    os.mkfifo(named_fifo)
    try:
        ingest = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "ingest", str(named_fifo)],
                                env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`ctx ingest` hung on a FIFO for {HANG_GUARD_S} s")
    assert ingest.returncode == 1, ingest.stderr[-3000:]
    assert ingest.stderr.splitlines()[-2:] == [
        f"skipped: {named_fifo}: a named pipe (FIFO), not a regular file; refused without opening it",
        "nothing to ingest"], ingest.stderr[-3000:]


def test_the_inbox_listing_and_the_hash_refuse_a_fifo_without_opening_it(tmp_path):
    """The sensor's listing names a FIFO for what it is (not "an empty file"), and the hash that registers a
    file refuses one swapped in after selection, at once: both decide from the mode, never block."""
    from contextual_assets.errors import DocumentError
    from contextual_assets.ingest.inbox.listing import LocalInbox, file_sha256

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "manual.md").write_text("# Manual\n\nThe pump is primed before each shift.\n")
    os.mkfifo(inbox / "queue.md")
    listing = LocalInbox(inbox).list()
    assert [os.path.basename(p) for p in listing.files] == ["manual.md"]
    (refused,) = listing.refused.values()
    assert "named pipe (FIFO)" in refused.reason and "queue.md" in refused.reason
    with pytest.raises(DocumentError, match="named pipe"):
        file_sha256(inbox / "queue.md")
    assert len(file_sha256(inbox / "manual.md")) == 64
