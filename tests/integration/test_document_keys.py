"""A document's key follows from its file, not from how it was named on the command line: `ctx
ingest docs/alpha.md` then `ctx ingest docs` update one document, not two. Through the real CLI
(`main`, in this process, with settings from the environment), the real store and Dagster runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contextual_assets.cli.main import main
from contextual_assets.cli.ingest_runs import collect_sources
from contextual_assets.ingest.inbox.document_keys import key_for_path, partition_key_for
from contextual_assets.ingest.inbox.tick_plan import LocalInbox

ALPHA = "# Alpha\n\nThe walrus ledger counts seventeen copper kettles.\n"
BETA = "# Beta\n\nThe heron timetable lists the ferry at noon.\n"
ALPHA_PHRASE = "walrus ledger seventeen copper kettles"


@pytest.fixture
def ctx(tmp_path, monkeypatch, capsys):
    """`ctx ...` in this process, in `tmp_path` (the current directory), with its own home and inbox."""
    for name in list(os.environ):
        if name.startswith(("CTX_", "DAGSTER_")) or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("CTX_HOME", str(tmp_path / ".ctx"))
    monkeypatch.setenv("CTX_INBOX", str(tmp_path / "inbox"))
    monkeypatch.setenv("CTX_HEADER_SOURCE", "structural")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))  # restored after the test
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                        ("TRANSFORMERS_VERBOSITY", "error")):
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "alpha.md").write_text(ALPHA)
    (tmp_path / "docs" / "beta.md").write_text(BETA)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def ingest(ctx, *paths: str) -> dict[str, dict]:
    code, out, err = ctx("ingest", *paths, "--json")
    assert code == 0, err
    return {o["key"]: o for o in json.loads(out)}


def status(ctx) -> dict:
    code, out, err = ctx("status", "--json")
    assert code == 0, err
    return json.loads(out)


def store():
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.settings import PlatformSettings

    return build_resources(PlatformSettings.from_env())["store"].open()


def test_a_file_then_its_folder_is_one_document(ctx, tmp_path):
    assert list(ingest(ctx, "docs/alpha.md")) == ["docs/alpha.md"]
    assert sorted(ingest(ctx, "docs")) == ["docs/alpha.md", "docs/beta.md"]

    state = status(ctx)
    assert state["sources"] == 2, "alpha is one source, not one per way it was named"
    alpha = str((tmp_path / "docs" / "alpha.md").resolve())
    assert [s.doc_id for s in store().corpus.list_sources() if s.path == alpha] == ["docs/alpha.md"]
    (version,) = [v for v in state["index_versions"] if v["index_version"] == state["current_index_version"]]
    assert version["documents"] == 2
    assert sorted(d.doc_id for d in store().corpus.documents(state["current_index_version"])) == \
        ["docs/alpha.md", "docs/beta.md"]

    code, out, err = ctx("search", ALPHA_PHRASE, "-k", "10", "--json")
    assert code == 0, err
    hits = json.loads(out)["hits"]
    assert [h["document"] for h in hits if "walrus ledger" in h["text"]] == ["docs/alpha.md"], "alpha comes back once"
    assert {h["document"] for h in hits} == {"docs/alpha.md", "docs/beta.md"}


def test_every_spelling_of_a_path_is_one_document(ctx, tmp_path):
    alpha = tmp_path / "docs" / "alpha.md"
    assert list(ingest(ctx, str(alpha.absolute()))) == ["docs/alpha.md"]
    assert list(ingest(ctx, "./docs/alpha.md", "docs/alpha.md", "docs/../docs/alpha.md")) == ["docs/alpha.md"]
    assert sorted(ingest(ctx, "docs/", str(tmp_path / "docs"))) == ["docs/alpha.md", "docs/beta.md"]
    assert status(ctx)["sources"] == 2


def test_a_file_ingested_before_keeps_its_key_from_anywhere(ctx, tmp_path, monkeypatch):
    alpha = tmp_path / "docs" / "alpha.md"
    assert list(ingest(ctx, "docs/alpha.md")) == ["docs/alpha.md"]
    # From inside the folder its path relative to the current directory is `alpha.md`: the
    # registration wins, so the same document is updated.
    monkeypatch.chdir(tmp_path / "docs")
    alpha.write_text(ALPHA + "\nThe kettles are polished on Fridays.\n")
    assert list(ingest(ctx, "alpha.md")) == ["docs/alpha.md"]
    assert status(ctx)["sources"] == 1
    assert store().corpus.get_source("docs/alpha.md").path == str(alpha.resolve())


def test_files_outside_the_source_root_and_inbox_get_a_stable_key(ctx, tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "gamma.md").write_text("# Gamma\n\nThe gamma note mentions lanterns.\n")
    outside = tmp_path / "elsewhere" / "delta.md"
    outside.parent.mkdir()
    outside.write_text("# Delta\n\nThe delta memo mentions ropes.\n")
    monkeypatch.setenv("CTX_SOURCE_ROOT", str(root))
    monkeypatch.chdir(tmp_path / "elsewhere")

    expected = partition_key_for(str(outside.resolve()).lstrip("/"))
    assert expected.endswith("/elsewhere/delta.md") and not expected.startswith("/")
    # Under CTX_SOURCE_ROOT: relative to it, wherever the command runs from.
    assert list(ingest(ctx, "../root/notes/gamma.md")) == ["notes/gamma.md"]
    assert list(ingest(ctx, "delta.md")) == [expected]
    # Without the registration, the same key from another directory and another spelling.
    monkeypatch.chdir(tmp_path)
    sources, refused = collect_sources([outside.absolute()], inbox=tmp_path / "inbox", source_root=root)
    assert [k for k, _ in sources] == [expected] and refused == []
    assert list(ingest(ctx, "elsewhere/delta.md")) == [expected]
    assert status(ctx)["sources"] == 2


# ---- collect_sources: the rules in order ------------------------------------------------------


def test_a_registration_wins_over_every_other_rule(tmp_path):
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    in_inbox = inbox / "sub" / "memo.md"
    in_inbox.write_text("# Memo\n")
    in_root = tmp_path / "docs" / "alpha.md"
    in_root.parent.mkdir()
    in_root.write_text(ALPHA)
    registered = {str(in_inbox.resolve()): "legacy/memo.md", str(in_root.resolve()): "alpha.md"}

    sources, refused = collect_sources([in_inbox, tmp_path / "docs"], inbox=inbox, source_root=tmp_path,
                                       registered=registered)
    assert sources == [("legacy/memo.md", in_inbox), ("alpha.md", in_root)] and refused == []
    # Without it: the inbox, then the source root.
    sources, refused = collect_sources([in_inbox, tmp_path / "docs"], inbox=inbox, source_root=tmp_path)
    assert sources == [("sub/memo.md", in_inbox), ("docs/alpha.md", in_root)] and refused == []


def test_a_file_in_the_inbox_gets_the_sensors_key(tmp_path):
    inbox = tmp_path / "inbox"  # under the source root: the inbox rule comes first
    (inbox / "reports").mkdir(parents=True)
    report = inbox / "reports" / "Q3 summary (final).md"
    report.write_text("# Q3\n\nRevenue rose.\n")
    (inbox / "plain.md").write_text("# Plain\n")

    sources, refused = collect_sources([report], inbox=inbox, source_root=tmp_path)
    assert refused == []
    assert [k for k, _ in sources] == [key_for_path(report, inbox)]
    assert sources[0][0].startswith("reports/Q3_summary_final_.md~")
    # Ingesting the whole inbox folder gives exactly the keys the sensor gives.
    sources, refused = collect_sources([inbox], inbox=inbox, source_root=tmp_path)
    sensor_keys = sorted(f.key for f in LocalInbox(inbox).list().files.values())
    assert sorted(k for k, _ in sources) == sensor_keys == ["plain.md", key_for_path(report, inbox)]


def test_the_same_file_reached_twice_is_one_source(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    alpha = docs / "alpha.md"
    alpha.write_text(ALPHA)
    (docs / "beta.md").write_text(BETA)
    (docs / "alias.md").symlink_to(alpha)  # a link inside the folder to a file inside it
    sources, refused = collect_sources([alpha, docs, tmp_path / "docs" / ".." / "docs" / "alpha.md"],
                                       inbox=tmp_path / "inbox", source_root=tmp_path)
    assert [k for k, _ in sources] == ["docs/alpha.md", "docs/beta.md"] and refused == []
    assert sources[0][1] == alpha


def test_a_key_registered_to_another_existing_file_is_refused_and_a_moved_files_key_is_reused(tmp_path):
    old = tmp_path / "old" / "alpha.md"
    old.parent.mkdir()
    old.write_text(ALPHA)
    new = tmp_path / "docs" / "alpha.md"
    new.parent.mkdir()
    new.write_text(ALPHA)
    registered = {str(old.resolve()): "docs/alpha.md"}
    sources, refused = collect_sources([new], inbox=tmp_path / "inbox", source_root=tmp_path, registered=registered)
    assert sources == []
    assert len(refused) == 1 and "same document key 'docs/alpha.md'" in refused[0] and str(old) in refused[0]
    # Once the registered file is gone (moved), the key passes to the file now there.
    old.unlink()
    sources, refused = collect_sources([new], inbox=tmp_path / "inbox", source_root=tmp_path, registered=registered)
    assert sources == [("docs/alpha.md", new)] and refused == []


def test_unsupported_hidden_and_missing_files_are_still_refused_or_skipped(tmp_path):
    docs = tmp_path / "docs"
    (docs / ".cache").mkdir(parents=True)
    (docs / ".cache" / "x.md").write_text("# hidden\n")
    (docs / "photo.xyz").write_bytes(b"\x00")
    (docs / "ok.md").write_text("# ok\n")
    sources, refused = collect_sources([docs, tmp_path / "missing.md"], inbox=tmp_path / "inbox",
                                       source_root=Path(tmp_path))
    assert [k for k, _ in sources] == ["docs/ok.md"]
    assert len(refused) == 2
    assert "unsupported file type '.xyz'" in refused[0] and "no such file or directory" in refused[1]
