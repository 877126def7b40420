"""Ingest progress moves per document as documents commit, not when a whole run returns."""

from __future__ import annotations

import threading
from pathlib import Path

import dagster as dg

from contextual_assets.cli.ingest_runs import (
    PartitionOutcome,
    collect_sources,
    ingest_partitions,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources

# Only a guard against a hang when progress is not reported early (the test then fails): never a
# threshold the passing case depends on.
DEADLOCK_GUARD_S = 120


def test_on_done_hears_of_a_commit_while_its_run_still_works(tmp_path, settings_factory, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(f"# {name.upper()}\n\nDocument {name} says something about berths.\n")
    settings = settings_factory()
    sources, refused = collect_sources([docs], inbox=Path(settings.inbox), source_root=tmp_path)
    assert not refused and len(sources) == 3
    store = build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    register_sources(store, instance, sources)

    # Every commit after the first waits until `on_done` has heard of one: with progress only at the
    # end of the run it never would, the guard runs out, and `heard_in_time` records that. (Every
    # commit goes through `replace_documents`, one document or several finished together.)
    heard = threading.Event()
    heard_in_time: list[bool] = []
    commits: list[str] = []
    store_class = type(store.corpus)  # the class the run's store is too (same settings)
    replace_documents = store_class.replace_documents

    def gated(self, documents, *args, **kwargs):
        if len(documents) > 1:  # the pipeline then commits each alone: one commit per document here
            raise RuntimeError("one document per transaction in this test")
        if commits:
            heard_in_time.append(heard.wait(DEADLOCK_GUARD_S))
        commits.extend(document.doc_id for document, _ in documents)
        return replace_documents(self, documents, *args, **kwargs)

    monkeypatch.setattr(store_class, "replace_documents", gated)
    calls: list[tuple[str, int, str, int]] = []  # (key, commits so far, the run's status then, chunks)

    def on_done(outcome: PartitionOutcome) -> None:
        run = instance.get_run_by_id(outcome.run_id)
        calls.append((outcome.key, len(commits), run.status.value if run else "none", outcome.chunks))
        heard.set()

    outcomes = ingest_partitions(build_definitions(settings), instance, sources, on_done=on_done, log_level="ERROR")

    assert all(o.success for o in outcomes), [o.error for o in outcomes]
    assert len({o.run_id for o in outcomes}) == 1, "the three documents share one run"
    assert sorted(call[0] for call in calls) == sorted(o.key for o in outcomes), "each document reported once"
    assert heard_in_time == [True, True], "later commits waited for a report that only came after the run"
    first_key, commits_then, status_then, _ = calls[0]
    assert status_then == "STARTED", f"the first report came with the run {status_then}"
    assert commits_then < 3 and first_key == commits[0]
    # What was reported early is what the run's result says.
    assert {call[0]: call[3] for call in calls} == {o.key: o.chunks for o in outcomes}
    assert all(o.chunks > 0 for o in outcomes)
