"""The `new_documents` sensor over a real inbox folder and a real (ephemeral) Dagster instance."""

from __future__ import annotations

import os
import time

import dagster as dg

from contextual_assets.defs.definitions import build_definitions, build_resources
from contextual_assets.embedding import embed_chunks
from contextual_assets.ingest.parse import parse_document
from contextual_assets.models import DocumentRecord
from contextual_assets.parsing.tokens import token_counter


class Harness:
    """Evaluates ticks like the daemon does: the cursor is carried between ticks and partition
    requests are applied to the instance."""

    def __init__(self, settings, dagster_home):
        self.defs = build_definitions(settings)
        self.sensor = self.defs.resolve_sensor_def("new_documents")
        self.store_resource = build_resources(settings)["store"]
        # A persistent (temporary-directory) instance, like the daemon's: the cursor and the
        # partitions live in its storage.
        dagster_home.mkdir(parents=True, exist_ok=True)
        self.instance = dg.DagsterInstance.local_temp(str(dagster_home))
        self.cursor: str | None = None

    def tick(self, cursor: str | None = "carry"):
        # As a context manager: the instance it opens from the ref is closed (and unregistered) after.
        with dg.build_sensor_context(
            instance_ref=self.instance.get_ref(), cursor=self.cursor if cursor == "carry" else cursor,
            resources={"store": self.store_resource}, definitions=self.defs,
        ) as context:
            data = self.sensor.evaluate_tick(context)
        for request in data.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            else:
                for key in request.partition_keys:
                    self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        self.cursor = data.cursor
        return data

    def partitions(self) -> set[str]:
        return set(self.instance.get_dynamic_partitions("documents"))

    def requested(self, data) -> list[str]:
        """The partitions a tick's run requests cover: one key, or a contiguous range of them."""
        ordered = self.instance.get_dynamic_partitions("documents")
        keys: list[str] = []
        for request in data.run_requests:
            if request.partition_key is not None:
                keys.append(request.partition_key)
            else:
                span = request.partition_key_range
                keys.extend(ordered[ordered.index(span.start): ordered.index(span.end) + 1])
        return keys


def test_add_modify_delete(tmp_path, settings_factory):
    settings = settings_factory()
    inbox = tmp_path / "inbox"
    (inbox / "team reports").mkdir(parents=True)
    doc = inbox / "team reports" / "Q3 (final).md"
    doc.write_text("# Q3\n\nRevenue grew 12 percent.\n")
    (inbox / "notes.txt").write_text("Plain notes.\n")
    harness = Harness(settings, tmp_path / "dagster_home")

    first = harness.tick()
    keys = harness.partitions()
    assert len(keys) == 2 and "notes.txt" in keys
    report_key = next(k for k in keys if k.startswith("team_reports/"))
    assert report_key.startswith("team_reports/Q3_final_.md~"), "readable, safe, and disambiguated"
    # New documents of one tick are pipelined in one run over their partition range.
    assert len(first.run_requests) == 1 and sorted(harness.requested(first)) == sorted(keys)
    assert all(r.run_key for r in first.run_requests)

    # A tick with nothing new requests nothing; replaying the old cursor repeats the same run keys
    # (Dagster drops a run key it has seen, so a retried tick launches nothing twice).
    assert harness.tick().run_requests == []
    replay = harness.tick(cursor=None)
    assert {r.run_key for r in replay.run_requests} == {r.run_key for r in first.run_requests}

    # Modify: same key, new run key.
    time.sleep(0.01)
    doc.write_text("# Q3\n\nRevenue grew 14 percent.\n")
    os.utime(doc, ns=(time.time_ns(), time.time_ns()))
    modified = harness.tick()
    assert harness.requested(modified) == [report_key]
    assert modified.run_requests[0].run_key not in {r.run_key for r in first.run_requests}

    # Materialize something for the document, then delete the file: partition and rows go.
    store = harness.store_resource.open()
    source = store.get_source(report_key)
    assert source is not None and source.path == str(doc.absolute())
    parsed = parse_document(report_key, doc, token_counter(), chunk_tokens=200, max_bytes=10**6, max_pdf_pages=10)
    from contextual_assets.models import HeaderedChunk

    class _Embedder:  # a stand-in is enough here: the store, not the embedding, is under test
        identity = "test"

        def embed(self, texts):
            return [[1.0, 0.0] for _ in texts]

    chunks = embed_chunks([HeaderedChunk(**c.model_dump()) for c in parsed.chunks], _Embedder())
    store.register_index_version("iv-x", {})
    store.replace_document(DocumentRecord(doc_id=report_key, index_version="iv-x", source_path=str(doc), kind="md",
                                          title="Q3", file_hash="h", n_chunks=len(chunks), updated_at=""), chunks)
    assert store.count_chunks(doc_id=report_key) == len(chunks) > 0
    doc.unlink()
    removed = harness.tick()
    assert removed.run_requests == []
    assert harness.partitions() == {"notes.txt"}
    assert store.count_chunks(doc_id=report_key) == 0 and store.get_source(report_key) is None


def inbox_with_one_document(tmp_path, settings_factory):
    """An inbox holding a.md, and a harness that has already ticked once over it."""
    settings = settings_factory()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.md").write_text("# A\n\ntext\n")
    harness = Harness(settings, tmp_path / "dagster_home")
    harness.tick()
    return settings, inbox, harness


def test_cursor_survives_restart(tmp_path, settings_factory):
    settings, inbox, harness = inbox_with_one_document(tmp_path, settings_factory)
    saved = harness.cursor
    # A new process (new definitions, same instance storage and stored cursor) sees no change.
    restarted = Harness(settings, tmp_path / "dagster_home")
    restarted.instance = harness.instance
    restarted.cursor = saved
    assert restarted.tick().run_requests == []
    (inbox / "b.md").write_text("# B\n\ntext\n")
    assert restarted.requested(restarted.tick()) == ["b.md"]


def test_symlink_outside_inbox_is_refused(tmp_path, settings_factory):
    settings = settings_factory()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (inbox / "link.txt").symlink_to(secret)
    (inbox / "ok.txt").write_text("inside")
    harness = Harness(settings, tmp_path / "dagster_home")
    data = harness.tick()
    assert harness.requested(data) == ["ok.txt"]


def test_missing_inbox_purges_nothing(tmp_path, settings_factory):
    _, inbox, harness = inbox_with_one_document(tmp_path, settings_factory)
    inbox.rename(tmp_path / "unmounted")
    data = harness.tick()
    assert data.skip_message and "missing" in data.skip_message
    assert harness.partitions() == {"a.md"}
