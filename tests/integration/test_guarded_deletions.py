"""Guarded deletions, through the real `new_documents` sensor (the harness of test_sensor.py), a real
Dagster instance and a real store on both back-ends: a tick that would remove too many documents (an
emptied folder, an emptied prefix) removes none until an operator confirms, the rest of the tick goes on,
one deleted file is still removed at once, and a purge keeps a document in the versions production can
roll back to until it no longer can."""

from __future__ import annotations

import pytest

from contextual_assets.ingest.inbox.listing import ObjectInbox, open_inbox
from tests.integration.test_s3_inbox import BUCKET, s3  # noqa: F401 - the S3 API fixture
from tests.integration.test_sensor import Harness, inbox_with
from tests.integration.test_store_contract import make_chunks, record
from tests.support import free_port, run_ctx


def holds(data) -> bool:
    """Whether a tick's skip reason says it held removals back."""
    return "confirm-removals" in (data.skip_message or "")


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request, settings_factory, env):
    """(settings, the `ctx` environment) over the same store: DuckDB under CTX_HOME, or Postgres."""
    if request.param == "duckdb":
        return settings_factory(), env
    url = request.getfixturevalue("pg_url")
    return settings_factory(database_url=url), {**env, "DATABASE_URL": url}


NAMES = ["a.md", "b.md", "c.md", "d.md", "e.md", "f.md"]


def six_in_the_inbox(tmp_path, settings):
    """Six files in the inbox, taken by one tick: (inbox, the sensor harness, the store)."""
    inbox = inbox_with(tmp_path, *NAMES)
    harness = Harness(settings, tmp_path / "dagster_home")
    harness.tick()
    return inbox, harness, harness.store_resource.open()


def test_an_emptied_inbox_removes_nothing_until_confirmed_and_one_deletion_goes_at_once(tmp_path, backend):
    settings, env = backend
    inbox, harness, store = six_in_the_inbox(tmp_path, settings)
    location = open_inbox(settings.inbox).location
    assert harness.partitions() == set(NAMES)

    # One file deleted, under the thresholds: removed in that tick, as before.
    (inbox / "f.md").unlink()
    one = harness.tick()
    assert not holds(one) and harness.partitions() == set(NAMES) - {"f.md"}
    assert store.corpus.get_source("f.md") is None

    # The folder emptied (an unmounted share's mount point) while a new file arrives: the new file is
    # requested, nothing is removed, the tick's log warns.
    for name in NAMES[:-1]:
        (inbox / name).unlink()
    (inbox / "new.md").write_text("# New\n\nArrived meanwhile.\n")
    emptied = harness.tick()
    assert harness.requested(emptied) == ["new.md"]
    assert harness.partitions() == set(NAMES[:-1]) | {"new.md"}
    assert all(store.corpus.get_source(name) is not None for name in NAMES[:-1])
    warned = harness.logged("all 5 of the inbox's documents are missing from its listing")
    assert warned and "WARNING" in warned[0] and "ctx inbox confirm-removals" in warned[0]
    held = store.inbox_state.held_removals(location)  # recorded, for an operator to confirm
    assert sorted(h.doc_id for h in held.values()) == NAMES[:-1]
    assert all(h.confirmed_at is None for h in held.values())

    # Held until confirmed, tick after tick; with no run to request, the reason is the tick's skip reason.
    still = harness.tick()
    assert "none of them removed" in still.skip_message and "ctx inbox confirm-removals" in still.skip_message
    assert harness.partitions() == set(NAMES[:-1]) | {"new.md"}
    assert store.inbox_state.held_removals(location) == held

    listed = run_ctx(env, "inbox", "held", check=True).stdout
    assert all(name in listed for name in NAMES[:-1]) and "5 held: all 5" in listed
    wrong = run_ctx(env, "inbox", "confirm-removals", "--expect", "4")
    assert wrong.returncode == 2 and "--expect 4, but 5 removals are held" in wrong.stderr
    assert store.inbox_state.held_removals(location) == held, "nothing confirmed"
    confirmed = run_ctx(env, "inbox", "confirm-removals", "--expect", "5", check=True).stdout
    assert "5 removals confirmed" in confirmed

    removed = harness.tick()
    assert removed.run_requests == [] and harness.partitions() == {"new.md"}
    assert all(store.corpus.get_source(name) is None for name in NAMES[:-1])
    assert len(harness.logged("(removal confirmed)")) == 5
    assert store.inbox_state.held_removals(location) == {}
    assert not holds(harness.tick())


def put_version(store, doc_id: str, version: str) -> None:
    store.corpus.register_index_version(version, {"header_source": "structural"})
    chunks = make_chunks(doc_id, [f"the text of {doc_id} in {version}"])
    store.corpus.replace_document(record(doc_id, version, len(chunks)), chunks)


def test_a_rollback_target_keeps_a_removed_document_until_it_is_rolled_past(tmp_path, backend):
    settings, _ = backend
    inbox, harness, store = six_in_the_inbox(tmp_path, settings)
    for version in ("iv-1", "iv-2"):
        put_version(store, "a.md", version)
    put_version(store, "b.md", "iv-0")
    for version in ("iv-0", "iv-1", "iv-2"):
        store.aliases.set("production", version, "test")

    (inbox / "a.md").unlink()
    harness.tick()
    assert "a.md" not in harness.partitions() and store.corpus.get_source("a.md") is None
    assert harness.logged("a.md: purged 1 chunks (kept in iv-1, which production can roll back to)")
    assert store.corpus.count_chunks("iv-2", "a.md") == 0, "out of production at once"
    assert store.corpus.count_chunks("iv-1", "a.md") == 1, "kept where a rollback returns"
    assert store.corpus.retained() == {"iv-1": ["a.md"]}

    store.aliases.rollback("production")  # -> iv-1: the old index, the removed document with it
    harness.tick()
    assert store.corpus.count_chunks("iv-1", "a.md") == 1
    store.aliases.rollback("production")  # -> iv-0: iv-1 can no longer be returned to
    harness.tick()
    assert harness.logged("purged 1 chunks kept for versions production can no longer roll back to")
    assert store.corpus.count_chunks(doc_id="a.md") == 0 and store.corpus.retained() == {}
    assert store.corpus.count_chunks("iv-0", "b.md") == 1


def test_an_emptied_prefix_is_held_and_an_object_that_cannot_be_checked_is_not_gone(tmp_path, settings_factory,
                                                                                     s3, monkeypatch):  # noqa: F811
    for name in ("a.md", "b.md", "c.md"):
        s3.put(f"docs/{name}", f"# {name}\n\ntext\n")
    harness = Harness(settings_factory(inbox=f"s3://{BUCKET}/docs"), tmp_path / "dagster_home")
    harness.tick()
    assert harness.partitions() == {"a.md", "b.md", "c.md"}
    inbox = ObjectInbox(f"s3://{BUCKET}/docs")
    url = f"s3://{BUCKET}/docs/a.md"
    assert inbox.gone(url) is False

    for name in ("a.md", "b.md", "c.md"):
        s3.client.delete_object(Bucket=BUCKET, Key=f"docs/{name}")
    held = harness.tick()
    assert "all 3 of the inbox's documents are missing" in held.skip_message
    assert harness.partitions() == {"a.md", "b.md", "c.md"}
    assert harness.store_resource.open().corpus.get_source("a.md") is not None
    assert inbox.gone(url) is True

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert inbox.gone(url) is False, "could not be checked: not gone"
