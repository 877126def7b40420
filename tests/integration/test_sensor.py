"""The `new_documents` sensor over a real inbox folder and a real (ephemeral) Dagster instance."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time

import dagster as dg
import pytest

from contextual_assets.definitions import build_definitions

from contextual_assets.defs.resources import build_resources
from contextual_assets.defs.ingest.sensor import InboxOptions, build_new_documents_sensor
from contextual_assets.embedding import embed_chunks
from contextual_assets.ingest.pipeline.parse import parse_document
from contextual_assets.models import DocumentRecord
from contextual_assets.parsing.tokens import token_counter


class Clock:
    """The sensor's clock in tests that wait for a retry's backoff: moved forward, never slept."""

    def __init__(self):
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """Evaluates ticks like the daemon does: the cursor is carried between ticks and partition
    requests are applied to the instance.

    The settle delay is 0 unless `settle_s` says otherwise: most tests write a file and tick at once."""

    def __init__(self, settings, dagster_home, settle_s: float | None = 0.0, clock: Clock | None = None):
        if settle_s is not None:
            settings = settings.model_copy(update={"inbox_settle_s": settle_s})
        self.settings = settings
        self.defs = build_definitions(settings)
        self.sensor = self.defs.resolve_sensor_def("new_documents")
        if clock is not None:  # the same sensor, reading the test's clock
            job = dg.define_asset_job("ingest_documents", selection=dg.AssetSelection.groups("ingest"))
            self.sensor = build_new_documents_sensor(job, InboxOptions.from_settings(settings), clock=clock)
        self.store_resource = build_resources(settings)["store"]
        # A persistent (temporary-directory) instance, like the daemon's: the cursor and the
        # partitions live in its storage.
        dagster_home.mkdir(parents=True, exist_ok=True)
        self.instance = dg.DagsterInstance.local_temp(str(dagster_home))
        self.cursor: str | None = None
        self.log: list[str] = []  # the last tick's log lines (what the UI shows for the tick)

    def tick(self, cursor: str | None = "carry"):
        # As a context manager: the instance it opens from the ref is closed (and unregistered) after.
        # The tick's logger writes to the stderr of its evaluation: kept for the test to read.
        with contextlib.redirect_stderr(io.StringIO()) as stderr, dg.build_sensor_context(
            instance_ref=self.instance.get_ref(), cursor=self.cursor if cursor == "carry" else cursor,
            resources={"store": self.store_resource}, definitions=self.defs,
        ) as context:
            data = self.sensor.evaluate_tick(context)
        self.log = stderr.getvalue().splitlines()
        sys.stderr.write(stderr.getvalue())
        for request in data.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            else:
                for key in request.partition_keys:
                    self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        if data.cursor is not None:  # a skipped tick keeps the cursor it had, as the daemon does
            self.cursor = data.cursor
        return data

    def launch(self, data) -> list[dg.ExecuteInProcessResult]:
        """Execute a tick's run requests as the daemon would launch them (same tags), in this process."""
        job = self.defs.resolve_job_def("ingest_documents")
        results = []
        for request in data.run_requests:
            kwargs = {"partition_key": request.partition_key} if request.partition_key else {}
            results.append(job.execute_in_process(
                instance=self.instance, tags=request.tags, raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}, **kwargs))
        return results

    def logged(self, text: str) -> list[str]:
        return [line for line in self.log if text in line]

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


def test_a_ticks_first_run_is_small_and_a_replayed_tick_repeats_its_runs(tmp_path, settings_factory):
    """Many new files: the first run holds an eighth of a full run, so it is created (one planned event per
    partition and asset) and reaches the fleet sooner; the rest are full runs. A replayed tick requests the
    same runs under the same keys (Dagster drops them)."""
    settings = settings_factory(partitions_per_run=16)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for i in range(40):
        (inbox / f"note-{i:02d}.md").write_text(f"# Note {i}\n\nThe crew logs seal {i}.\n")
    harness = Harness(settings, tmp_path / "dagster_home")
    first = harness.tick()
    sizes = [len(harness.requested(dg.SensorResult(run_requests=[r]))) for r in first.run_requests]
    assert sizes[0] == 2 and max(sizes[1:]) > 2 and max(sizes) <= 16 and sum(sizes) == 40, sizes
    assert sorted(harness.requested(first)) == sorted(harness.partitions())
    replay = harness.tick(cursor=None)
    assert [r.run_key for r in replay.run_requests] == [r.run_key for r in first.run_requests]


def test_the_sensor_ticks_at_the_first_loop_pass_after_its_interval(tmp_path, monkeypatch):
    """Dagster's loop passes every 5 s: a minimum interval equal to the setting skipped every other pass
    (ticks 5 or 10 s apart); one second under it, a 5 s setting ticks at every pass."""
    from contextual_assets.defs.ingest.sensor import build_new_documents_sensor
    from contextual_assets.errors import ConfigurationError
    from contextual_assets.ingest.inbox.watcher import InboxOptions
    from contextual_assets.settings import PlatformSettings

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for setting, minimum in ((5, 4), (30, 29)):
        settings = PlatformSettings(inbox=str(inbox), inbox_interval_s=setting)
        sensor = build_new_documents_sensor("ingest_documents", InboxOptions.from_settings(settings))
        assert sensor.minimum_interval_seconds == minimum
    monkeypatch.setenv("CTX_INBOX_INTERVAL_S", "4")
    with pytest.raises(ConfigurationError, match="CTX_INBOX_INTERVAL_S"):
        PlatformSettings.from_env()


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
    source = store.corpus.get_source(report_key)
    assert source is not None and source.path == str(doc.absolute())
    parsed = parse_document(report_key, doc, token_counter(), chunk_tokens=200, max_bytes=10**6, max_pdf_pages=10)
    from contextual_assets.models import HeaderedChunk

    class _Embedder:  # a stand-in is enough here: the store, not the embedding, is under test
        identity = "test"

        def embed(self, texts):
            return [[1.0, 0.0] for _ in texts]

    chunks = embed_chunks([HeaderedChunk(**c.model_dump()) for c in parsed.chunks], _Embedder())
    store.corpus.register_index_version("iv-x", {})
    store.corpus.replace_document(DocumentRecord(doc_id=report_key, index_version="iv-x", source_path=str(doc),
                                                 kind="md", title="Q3", file_hash="h", n_chunks=len(chunks),
                                                 updated_at=""), chunks)
    assert store.corpus.count_chunks(doc_id=report_key) == len(chunks) > 0
    doc.unlink()
    removed = harness.tick()
    assert removed.run_requests == []
    assert harness.partitions() == {"notes.txt"}
    assert store.corpus.count_chunks(doc_id=report_key) == 0 and store.corpus.get_source(report_key) is None


def inbox_with(tmp_path, *names: str):
    """An inbox folder holding a small Markdown document under each of `names`."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in names:
        (inbox / name).write_text(f"# {name}\n\nThe text of {name}.\n")
    return inbox


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


# ---- refusals, settling, retries, state in the store ----------------------------------------------


def age(path, seconds: float) -> None:
    """Give a file a modification time `seconds` in the past (instead of sleeping)."""
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


def entry(harness, path):
    return harness.store_resource.open().inbox_state.entries(harness.settings.inbox).get(str(path.absolute()))


def test_files_ctx_ingest_would_skip_are_refused_once_and_never_partitions(tmp_path, settings_factory):
    from contextual_assets.parsing import SUPPORTED_EXTENSIONS

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.md").write_text("# A\n\ntext\n")
    (inbox / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (inbox / "Makefile").write_text("all:\n")
    (inbox / "big.txt").write_text("words " * 400_000)  # 2.4 MB
    harness = Harness(settings_factory(max_file_mb=1.0), tmp_path / "dagster_home")
    assert ".png" not in SUPPORTED_EXTENSIONS and ".md" in SUPPORTED_EXTENSIONS

    data = harness.tick()
    assert harness.partitions() == {"a.md"} and harness.requested(data) == ["a.md"]
    assert len(harness.logged("photo.png: unsupported file type '.png'")) == 1
    assert len(harness.logged("Makefile: unsupported file type '(none)'")) == 1
    assert len(harness.logged("big.txt: file is 2.4 MB, over the limit of 1.0 MB (CTX_MAX_FILE_MB)")) == 1

    # Logged once, not on every tick; never a partition.
    again = harness.tick()
    assert again.run_requests == [] and harness.logged("refused") == []
    assert harness.partitions() == {"a.md"}

    # A refused file that becomes acceptable is taken like a new one.
    (inbox / "big.txt").write_text("small now\n")
    assert harness.requested(harness.tick()) == ["big.txt"]


def test_a_file_being_written_is_taken_only_once_it_settles(tmp_path, settings_factory):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    old = inbox / "old.md"
    old.write_text("# Old\n\nwritten long ago\n")
    age(old, 3600)
    clock = Clock()
    harness = Harness(settings_factory(), tmp_path / "dagster_home", settle_s=2.0, clock=clock)

    # A file whose modification time is already older than the delay is taken at once.
    assert harness.requested(harness.tick()) == ["old.md"]

    growing = inbox / "growing.md"
    growing.write_text("# Growing\n\nfirst half")
    assert harness.tick().run_requests == [] and "growing.md" not in harness.partitions()
    first = entry(harness, growing)
    assert first.status == "settling" and first.revision is None, "not hashed while being written"

    clock.advance(1.0)
    with growing.open("a") as handle:
        handle.write(" and the second half\n")
    now_ns = int(clock.now * 1e9)
    os.utime(growing, ns=(now_ns, now_ns))  # written "now" on the sensor's clock
    assert harness.tick().run_requests == [], "changed again: the settle clock starts over"
    assert entry(harness, growing).first_seen > first.first_seen

    clock.advance(2.5)  # unchanged for longer than the delay
    data = harness.tick()
    assert harness.requested(data) == ["growing.md"]
    source = harness.store_resource.open().corpus.get_source("growing.md")
    from contextual_assets.ingest.inbox.tick_plan import file_sha256

    assert source.file_hash == file_sha256(growing), "the whole file was taken, not the first half"
    assert harness.tick().run_requests == []


def test_failed_documents_are_retried_with_backoff_then_given_up(tmp_path, settings_factory):
    from tests.support import free_port

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    doc = inbox / "tariffs.md"
    doc.write_text("# Tariffs\n\nThe tariff schedule is attached.\n")
    clock = Clock()
    # Nothing listens on this port: the embedder is down, a failure that may pass (an outage).
    settings = settings_factory(inbox_retry_limit=2, inbox_retry_base_s=30.0, ingest_retries=0,
                                embed_base_url=f"http://127.0.0.1:{free_port()}/v1", embed_model="m")
    harness = Harness(settings, tmp_path / "dagster_home", clock=clock)

    first = harness.tick()
    assert harness.requested(first) == ["tariffs.md"]
    [run] = harness.launch(first)
    assert not run.success

    noticed = harness.tick()
    assert noticed.run_requests == []
    assert harness.logged(f"tariffs.md: run {run.run_id} failed; retry 1 of 2 in 30 s")
    assert harness.tick().run_requests == [] and not harness.logged("tariffs.md"), "a failure is counted once"

    clock.advance(29)
    assert harness.tick().run_requests == [], "not before its backoff"
    clock.advance(2)
    retry = harness.tick()
    assert harness.requested(retry) == ["tariffs.md"] and harness.logged("tariffs.md: retry 1 of 2 requested")
    run_keys = {first.run_requests[0].run_key, retry.run_requests[0].run_key}
    assert len(run_keys) == 2, "each attempt has its own run key"
    assert not harness.launch(retry)[0].success

    harness.tick()
    assert harness.logged("retry 2 of 2 in 60 s"), "the backoff doubles"
    clock.advance(59)
    assert harness.tick().run_requests == []
    clock.advance(2)
    second = harness.tick()
    assert harness.requested(second) == ["tariffs.md"] and second.run_requests[0].run_key not in run_keys
    assert not harness.launch(second)[0].success

    harness.tick()
    assert harness.logged("tariffs.md: gave up after 3 failed run(s)")
    clock.advance(10_000)
    assert harness.tick().run_requests == [] and not harness.logged("tariffs.md"), "given up: no more runs"
    assert entry(harness, doc).status == "gave_up"

    # Saving the file again (a new revision) is how a user asks for another try: the count starts over.
    doc.write_text("# Tariffs\n\nThe tariff schedule is attached, revised.\n")
    again = harness.tick()
    assert harness.requested(again) == ["tariffs.md"] and entry(harness, doc).failed_attempts == 0


def test_a_document_that_cannot_pass_is_not_retried(tmp_path, settings_factory):
    """A parse error fails the same way every time: the run says so per document (an observation of
    `chunk_embeddings`), the sensor gives up at once; its neighbour in the run committed and is left alone."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "good.md").write_text("# Good\n\nThe tariff schedule is attached.\n")
    bad = inbox / "bad.md"
    bad.write_bytes(b"# Bad\n\n\x00\x00 not text")
    clock = Clock()
    harness = Harness(settings_factory(inbox_retry_limit=2, inbox_retry_base_s=30.0), tmp_path / "dagster_home",
                      clock=clock)
    first = harness.tick()
    assert sorted(harness.requested(first)) == ["bad.md", "good.md"] and len(first.run_requests) == 1
    [run] = harness.launch(first)
    assert not run.success  # bad.md failed; good.md committed in the same run

    harness.tick()
    assert harness.logged(f"bad.md: run {run.run_id} failed and a retry would fail the same way")
    assert not harness.logged("good.md"), "a document the failed run committed is not retried"
    assert entry(harness, bad).status == "gave_up" and "binary content" in entry(harness, bad).reason
    clock.advance(10_000)
    assert harness.tick().run_requests == []

    bad.write_text("# Bad, fixed\n\nNow it is text.\n")
    fixed = harness.tick()
    assert harness.requested(fixed) == ["bad.md"]
    assert harness.launch(fixed)[0].success
    assert entry(harness, bad).failed_attempts == 0


def test_the_run_retries_retryable_failures_only(tmp_path, settings_factory):
    from tests.support import free_port

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.md").write_text("# A\n\nThe embedding endpoint is down.\n")
    # Nothing listens on this port: the embedder fails, which a retry may cure (an outage).
    settings = settings_factory(embed_base_url=f"http://127.0.0.1:{free_port()}/v1", embed_model="m",
                                ingest_retries=2, ingest_retry_delay_s=0.0)
    harness = Harness(settings, tmp_path / "dagster_home")
    [outage] = harness.launch(harness.tick())
    assert not outage.success
    retried = [e for e in outage.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(retried) == 2, "retried up to CTX_INGEST_RETRIES"

    # Content that cannot be parsed fails the same way every time: no retry.
    (inbox / "binary.md").write_bytes(b"\x00\x01\x02 not text")
    [broken] = harness.launch(harness.tick())
    assert not broken.success
    assert [e for e in broken.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == []
    failure = next(e for e in broken.all_events if e.event_type_value == "STEP_FAILURE")
    assert "binary content" in failure.step_failure_data.user_failure_data.description


def test_state_lives_in_the_store_and_the_cursor_stays_small(tmp_path, settings_factory):
    from contextual_assets.ingest.inbox.tick_plan import (
        Registry,
        TickSettings,
        open_inbox,
        plan_tick,
    )

    inbox = tmp_path / "inbox"
    for i in range(300):
        folder = inbox / f"team-{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note {i:03d}.txt").write_text(f"Note {i}.\n")
    harness = Harness(settings_factory(), tmp_path / "dagster_home")
    first = harness.tick()
    assert len(harness.requested(first)) == 300
    cursor = harness.cursor
    assert len(cursor) < 120 and "note" not in cursor, "the cursor holds no per-file state"
    store = harness.store_resource.open()
    rows = store.inbox_state.entries(harness.settings.inbox)
    assert len(rows) == 300 and all(r.status == "requested" and r.revision for r in rows.values())

    # An unchanged inbox: nothing to hash, nothing to write, nothing to request.
    source = open_inbox(harness.settings.inbox)
    settings = TickSettings(now=time.time(), tick=2, committed_tick=1, settle_s=0, max_bytes=10**8, retry_limit=3)
    plan = plan_tick(source, source.list(), rows, harness.partitions(),
                     Registry(lambda: {}, lambda _: set()), settings)
    assert plan.rows == rows and not (plan.taken or plan.requests or plan.deletes or plan.removed)
    assert harness.tick().run_requests == [] and len(harness.cursor) < 120

    # A tick whose cursor was never committed (the daemon stopped before launching its runs) is
    # evaluated again from the previous cursor and requests the same runs.
    (inbox / "team-0" / "note 000.txt").write_text("Note 0, amended.\n")
    committed = harness.cursor
    lost = harness.tick()
    replayed = harness.tick(cursor=committed)
    assert [r.run_key for r in replayed.run_requests] == [r.run_key for r in lost.run_requests]
    assert len(lost.run_requests) == 1 and harness.requested(replayed) == harness.requested(lost)
    assert harness.requested(lost)[0].startswith("team-0/note_000.txt")


def test_documents_already_ingested_are_adopted_not_ingested_again(tmp_path, settings_factory):
    from contextual_assets.cli.ingest_runs import (
        collect_sources,
        ingest_partitions,
        register_sources,
    )

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    done = inbox / "done.md"
    done.write_text("# Done\n\nIngested with ctx ingest before the sensor was turned on.\n")
    harness = Harness(settings_factory(), tmp_path / "dagster_home")
    sources, _ = collect_sources([done], inbox=inbox)
    register_sources(harness.store_resource.open(), harness.instance, sources)
    assert ingest_partitions(harness.defs, harness.instance, sources, log_level="CRITICAL")[0].success
    (inbox / "new.md").write_text("# New\n\nNever ingested.\n")

    # A cursor of the older format (the whole inbox in the cursor) starts afresh from the store's state.
    data = harness.tick(cursor='{"entries": {"done.md": {"key": "done.md"}}}')
    assert harness.requested(data) == ["new.md"], "the stored revision of done.md is adopted, not run again"
    assert entry(harness, done).status == "requested" and entry(harness, done).requested_tick == 0
    done.write_text("# Done\n\nEdited after the sensor took over.\n")
    assert harness.requested(harness.tick()) == ["done.md"]


def test_the_state_is_kept_in_postgres_too(tmp_path, settings_factory, pg_url):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.md").write_text("# A\n\nfirst\n")
    (inbox / "b.txt").write_text("second\n")
    (inbox / "c.png").write_bytes(b"\x89PNG")
    harness = Harness(settings_factory(database_url=pg_url), tmp_path / "dagster_home")
    store = harness.store_resource.open()
    assert store.dialect == "postgres"

    assert sorted(harness.requested(harness.tick())) == ["a.md", "b.txt"]
    rows = store.inbox_state.entries(harness.settings.inbox)
    assert {r.status for r in rows.values()} == {"requested", "refused"} and len(rows) == 3
    assert harness.tick().run_requests == [] and store.inbox_state.entries(harness.settings.inbox) == rows
    (inbox / "b.txt").write_text("second, changed\n")
    assert harness.requested(harness.tick()) == ["b.txt"]
    (inbox / "a.md").unlink()
    harness.tick()
    assert harness.partitions() == {"b.txt"} and store.corpus.get_source("a.md") is None
    harness.tick()
    assert str(inbox / "a.md") not in store.inbox_state.entries(harness.settings.inbox), "forgotten once its partition is gone"


def test_a_reset_cursor_requests_again_under_the_first_run_keys(tmp_path, settings_factory):
    """A tick whose cursor was never committed, or a cursor reset in the UI, makes its requests again;
    each keeps the run key it was first requested under, so Dagster drops every run it already launched
    instead of ingesting the inbox again under new, regrouped keys."""
    inbox = inbox_with(tmp_path, "a.md", "b.md", "c.md")
    harness = Harness(settings_factory(), tmp_path / "dagster_home")
    first = harness.tick()
    assert len(first.run_requests) == 1 and sorted(harness.requested(first)) == ["a.md", "b.md", "c.md"]
    (inbox / "d.md").write_text("# d\n\ntext of d\n")
    second = harness.tick()
    assert harness.requested(second) == ["d.md"]
    launched = {r.run_key for r in first.run_requests + second.run_requests}

    replay = harness.tick(cursor=None)
    assert sorted(harness.requested(replay)) == ["a.md", "b.md", "c.md", "d.md"]
    assert {r.run_key for r in replay.run_requests} == launched


def test_a_retry_of_the_step_skips_documents_its_failed_attempt_committed(tmp_path, settings_factory):
    """The ingest step commits document by document; its retry redoes only what is not stored at every
    version the run builds from the registered revision (a changed file counts as not stored)."""
    import dataclasses

    from contextual_assets.lifecycle.build_targets import current_target
    from contextual_assets.ingest.pipeline.run_plan import uncommitted

    inbox = inbox_with(tmp_path, "a.md", "b.md", "c.md")
    harness = Harness(settings_factory(), tmp_path / "dagster_home")
    first = harness.tick()
    assert all(r.success for r in harness.launch(first))
    resources = build_resources(harness.settings)
    store = resources["store"].open()
    target = current_target(resources["headers"], resources["embedder"], resources["parsing"], store)
    assert uncommitted(store, ["a.md", "b.md", "c.md"], [target]) == []
    # b.md changed since it was committed (a newer revision registered): it is still to do.
    (inbox / "b.md").write_text("# b.md\n\nNew text.\n")
    harness.tick()
    assert uncommitted(store, ["a.md", "b.md", "c.md"], [target]) == ["b.md"]
    # A document never stored at a second target version is to do for it.
    other = dataclasses.replace(target, index_version="iv-not-built")
    assert uncommitted(store, ["a.md", "c.md"], [target, other]) == ["a.md", "c.md"]


def test_retries_run_one_document_each(tmp_path, settings_factory):
    """Documents of one failed run are retried in runs of their own: one that kills its run worker must
    not fail its neighbours again."""
    from tests.support import free_port

    inbox_with(tmp_path, "a.md", "b.md")
    clock = Clock()
    settings = settings_factory(inbox_retry_base_s=30.0, ingest_retries=0,
                                embed_base_url=f"http://127.0.0.1:{free_port()}/v1", embed_model="m")
    harness = Harness(settings, tmp_path / "dagster_home", clock=clock)
    first = harness.tick()
    assert len(first.run_requests) == 1 and sorted(harness.requested(first)) == ["a.md", "b.md"]
    assert not harness.launch(first)[0].success
    harness.tick()
    clock.advance(31)
    retry = harness.tick()
    assert sorted(harness.requested(retry)) == ["a.md", "b.md"]
    assert len(retry.run_requests) == 2 and all(r.partition_key for r in retry.run_requests)
