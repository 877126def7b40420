"""The evaluation gate end to end through Dagster: a degraded version fails `eval_gate` and is not
promoted; a good version is; rollback restores; stale gold is reported apart; reviewed exceptions
keep the raw score; evaluation is deterministic; the needle set is ingested and graded."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from bench.corpora import derive_version, remove_evidence
from contextual_assets.cli.evaluation_runs import evaluate_and_promote as run_evaluation
from contextual_assets.cli.ingest_runs import (
    collect_sources,
    ingest_partitions,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from contextual_assets.settings import PlatformSettings
from eval_assets.evaluate import evaluate
from eval_assets.gold.gold_set import Evidence, GoldSet, GoldTask, load_gold, write_gold

SPANS = [
    ("liquidated damages per business day for a late milestone", "0.5 percent of the Milestone Fee for each Business Day of delay", "supply_agreement.pdf"),
    ("what filled the disk of the orders database", "left max_slot_wal_keep_size at its default of -1", "incident_postmortem.pdf"),
    ("hotel reimbursement limit per night in London", "EUR 210 per night in London", "employee_handbook.pdf"),
    ("token bucket refill rate", "class TokenBucket", "rate_limiter.py"),
    ("what does REM-1 change on the PostgreSQL clusters", "REM-1: set max_slot_wal_keep_size to 200 GB", "incident_postmortem.pdf"),
    ("which depot is covered by Phase 1", "Phase 1 covers the installation of 120 Sensors", "supply_agreement.pdf"),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory, samples_dir):
    """The sample corpus ingested once (structural headers) and a gold file keyed to raw text."""
    from contextual_assets.settings import PlatformSettings

    root = tmp_path_factory.mktemp("gate")
    settings = PlatformSettings(home=str(root / ".ctx"), inbox=str(root / "inbox"),
                                duckdb_path=str(root / "index.duckdb"), header_source="structural",
                                gate_floors_json=json.dumps({"pass_at_10": 0.5}))
    tasks = [GoldTask(id=f"t{i}", query=q, evidence=[Evidence(text=span, doc_id=doc)])
             for i, (q, span, doc) in enumerate(SPANS)]
    tasks.append(GoldTask(id="stale-1", query="what is in the retired handbook",
                          evidence=[Evidence(text="anything", doc_id="retired_handbook.pdf")]))
    gold = write_gold(root / "gold.jsonl", tasks)
    defs = build_definitions(settings)
    resources = build_resources(settings)
    store = resources["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    sources, _ = collect_sources([samples_dir], inbox=root / "inbox", source_root=samples_dir.parent)
    register_sources(store, instance, sources)
    assert all(o.success for o in ingest_partitions(defs, instance, sources, log_level="ERROR"))
    (good,) = [v["index_version"] for v in store.corpus.index_versions()]
    return {"settings": settings, "defs": defs, "store": store, "instance": instance, "gold": gold, "good": good,
            "embedder": resources["embedder"].get(), "root": root}


def evaluate_and_promote(world, candidate: str, gold=None, **gate_overrides):
    settings = world["settings"].model_copy(update=gate_overrides) if gate_overrides else world["settings"]
    defs = build_definitions(settings) if gate_overrides else world["defs"]
    outcome = run_evaluation(defs, world["instance"], str(gold or world["gold"]), candidate, log_level="ERROR")
    promoted = [m for m in outcome.result.asset_materializations_for_node("promoted_index")]
    return outcome.result, outcome.checks, promoted


def document_checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    """{document partition: its document_gate check} of one run."""
    return {c.partition: c for c in result.get_asset_check_evaluations() if c.check_name == "document_gate"}


def test_gate_promotes_good_blocks_degraded_and_rolls_back(world, tmp_path):
    store = world["store"]
    assert store.aliases.get("production") is None, "this test runs first: no production yet"
    # A first promotion must meet the shipped floors: a candidate that scores 0 is never promoted.
    # Its gold: queries in a vocabulary the corpus does not use, kept where the good version ranks
    # the evidence beyond the evaluation depth (so every living task scores exactly 0).
    pool = [GoldTask(id=f"z{i}-{j}", query=f"qx{i}{j}vz wq{j}{i}zk", evidence=[Evidence(text=span, doc_id=doc)])
            for i, (_, span, doc) in enumerate(SPANS) for j in range(4)]
    report = evaluate(store, world["embedder"], GoldSet(name="pool", sha256="pool", tasks=pool), world["good"], modes=("hybrid",))
    zero = [t for t in pool if next(r for r in report.tasks if r.task_id == t.id).first_rank is None]
    assert zero, "no query of the pool misses"
    _, checks, promoted = evaluate_and_promote(world, world["good"], gold=write_gold(tmp_path / "zero.jsonl", zero),
                                               gate_floors_json=PlatformSettings.default("gate_floors_json"))
    assert checks["eval_gate"].metadata["pass_at_20_raw"].value == 0.0
    assert not checks["eval_gate"].passed and promoted == [] and store.aliases.get("production") is None
    assert "below the floor" in checks["eval_gate"].metadata["reasons"].value
    # A first promotion judged on half-stale gold is blocked by the stale+broken ceiling.
    gold = load_gold(world["gold"])
    stale = [t.model_copy(update={"id": f"gone-{t.id}", "evidence": [e.model_copy(update={"doc_id": "gone.pdf"})
                                                                      for e in t.evidence]}) for t in gold.tasks]
    half_stale = write_gold(tmp_path / "half_stale.jsonl", [*gold.tasks, *stale])
    _, checks, promoted = evaluate_and_promote(world, world["good"], gold=half_stale)
    assert not checks["eval_gate"].passed and promoted == [] and store.aliases.get("production") is None
    assert "stale+broken" in checks["eval_gate"].metadata["reasons"].value

    result, checks, promoted = evaluate_and_promote(world, world["good"])
    assert checks["eval_gate"].passed and promoted, "first good version: floors only, promoted"
    assert store.aliases.get("production") == world["good"]
    assert checks["eval_gate"].severity == dg.AssetCheckSeverity.ERROR

    # The candidate lost the evidence of two tasks production retrieves: they count as misses (rank
    # not found), not as tasks dropped from the comparison.
    lost = [t for t in gold.tasks if t.id in ("t0", "t2")]
    degraded = derive_version(store, world["embedder"], world["good"], remove_evidence(lost))
    result, checks, promoted = evaluate_and_promote(world, degraded)
    assert not checks["eval_gate"].passed
    assert promoted == [], "a blocking failed check stops promotion in the same run"
    assert store.aliases.get("production") == world["good"]
    metadata = checks["eval_gate"].metadata
    assert metadata["lost_tasks"].value == "t0, t2" and metadata["compared_tasks"].value == len(SPANS)
    assert metadata["pass_at_10_delta"].value <= -2 / len(SPANS) + 1e-3
    assert "pass_at_10 fell" in metadata["reasons"].value

    # promoted_index on its own refuses too: it reads the stored gate decision.
    lone = world["defs"].resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world["instance"], asset_selection=[dg.AssetKey("promoted_index")], raise_on_error=False)
    assert not lone.success and store.aliases.get("production") == world["good"]

    swapped = derive_version(store, world["embedder"], world["good"], "unchanged")
    result, checks, promoted = evaluate_and_promote(world, swapped)
    assert checks["eval_gate"].passed and promoted
    assert store.aliases.get("production") == swapped
    assert checks["eval_gate"].metadata["pass_at_10_delta"].value == pytest.approx(0.0, abs=1e-9)

    assert store.aliases.rollback("production") == (world["good"], swapped)
    assert store.aliases.get("production") == world["good"]


def test_stale_tasks_are_reported_not_failed(world):
    result, checks, _ = evaluate_and_promote(world, world["good"])
    event = world["instance"].get_latest_materialization_event(dg.AssetKey("candidate_evaluation"))
    metadata = event.asset_materialization.metadata
    assert metadata["n_stale"].value == 1 and metadata["n_living"].value == len(SPANS)
    assert checks["gold_hygiene"].metadata["stale_ids"].value == "stale-1"
    assert not checks["gold_hygiene"].passed and checks["gold_hygiene"].severity == dg.AssetCheckSeverity.WARN
    run = world["store"].eval_runs.latest(metadata["candidate_version"].value, metadata["evaluator_id"].value)
    rows = [t for t in world["store"].eval_runs.tasks(run["run_id"]) if t["mode"] == "hybrid"]
    assert {t["task_id"]: t["status"] for t in rows}["stale-1"] == "stale"
    living = [t["pass_at_10"] for t in rows if t["status"] == "living"]
    assert len(living) == len(SPANS)
    assert metadata["hybrid_pass_at_10"].value == pytest.approx(sum(living) / len(living), abs=1e-4), (
        "the stale task is not counted as a miss")


def test_reviewed_exceptions_are_scoped_and_keep_the_raw_score(world, tmp_path):
    store = world["store"]
    store.aliases.set("production", world["good"], "test setup")
    degraded = derive_version(store, world["embedder"], world["good"], "swap_headers")
    report = evaluate(store, world["embedder"], load_gold(world["gold"]), degraded)
    misses = [t.task_id for t in report.tasks if t.mode == "hybrid" and t.status == "living" and t.pass_at_5 < 1.0]
    reviewed = misses or ["t0"]
    scope = f"evaluator_id: {report.evaluator_id}, expires: 2999-12-31"
    exceptions = tmp_path / "exceptions.yaml"
    exceptions.write_text(
        "".join(f"- {{task_id: {t}, reason: gold chunk reworded, reviewer: qa, date: 2026-11-30, "
                f"index_version: {degraded}, {scope}}}\n" for t in reviewed)
        # Out of scope: expired, or written for another version. Listed, never applied.
        + f"- {{task_id: t1, reason: old review, reviewer: qa, date: 2020-01-01, index_version: {degraded}, "
          f"evaluator_id: {report.evaluator_id}, expires: 2020-12-31}}\n"
        + f"- {{task_id: t2, reason: other version, reviewer: qa, date: 2026-11-30, index_version: iv-other, {scope}}}\n"
        + "- {task_id: t3, reason: unscoped, reviewer: qa, date: 2020-01-01}\n")
    _, checks, _ = evaluate_and_promote(world, degraded, gate_exceptions_path=str(exceptions))
    metadata = checks["eval_gate"].metadata
    assert metadata["excepted_tasks"].value == ", ".join(sorted(reviewed))
    ignored = metadata["ignored_exceptions"].value
    assert "t1: expired on 2020-12-31" in ignored and "t2:" in ignored and "t3:" in ignored, ignored
    raw, with_exceptions = metadata["pass_at_5_raw"].value, metadata["pass_at_5_with_exceptions"].value
    assert raw == pytest.approx(sum(t.pass_at_5 for t in report.tasks if t.mode == "hybrid" and t.status == "living")
                                / len(SPANS), abs=1e-4), "the raw number is never rewritten"
    if misses:
        assert with_exceptions > raw


def test_a_candidate_missing_a_production_document_is_blocked(world):
    store = world["store"]
    store.aliases.set("production", world["good"], "test setup")
    dropped = min(d.doc_id for d in store.corpus.documents(world["good"]))
    partial = derive_version(store, world["embedder"], world["good"], "unchanged", name="partial", drop_docs=(dropped,))
    _, checks, promoted = evaluate_and_promote(world, partial)
    live = len(store.corpus.documents(world["good"]))
    assert not checks["eval_gate"].passed and promoted == [] and store.aliases.get("production") == world["good"]
    reasons = checks["eval_gate"].metadata["reasons"].value
    assert f"covers {live - 1} of {live} live documents; 1 missing ({dropped})" in reasons, reasons
    event = world["instance"].get_latest_materialization_event(dg.AssetKey("candidate_evaluation"))
    assert event.asset_materialization.metadata["coverage"].value["missing_ids"] == [dropped]


def test_evaluation_is_deterministic(world):
    gold = load_gold(world["gold"])
    first = evaluate(world["store"], world["embedder"], gold, world["good"])
    second = evaluate(world["store"], world["embedder"], gold, world["good"])
    assert first.metrics == second.metrics and first.rows() == second.rows()
    assert first.evaluator_id == second.evaluator_id


def test_needle_set_is_ingested_and_graded(world, samples_dir, tmp_path):
    from bench.needles import build_needle_set

    copies, tasks = build_needle_set([samples_dir / n for n in ("supply_agreement.pdf", "employee_handbook.pdf")],
                                     tmp_path / "needles", per_document=6, seed=3,
                                     min_section_words=60)
    gold = write_gold(tmp_path / "needles.jsonl", tasks)
    settings = world["settings"].model_copy(update={"duckdb_path": str(tmp_path / "needles.duckdb")})
    defs, store = build_definitions(settings), build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    sources, _ = collect_sources(copies, inbox=world["root"] / "inbox", source_root=tmp_path / "needles")
    register_sources(store, instance, sources)
    assert all(o.success for o in ingest_partitions(defs, instance, sources, log_level="ERROR"))
    result = run_evaluation(defs, instance, str(gold), log_level="ERROR").result
    (materialization,) = result.asset_materializations_for_node("candidate_evaluation")
    metadata = materialization.metadata
    assert metadata["n_living"].value == len(tasks) >= 10
    for partition in result.asset_materializations_for_node("retrieval_eval"):
        assert 0.0 <= partition.metadata["within_section_confusion"].value <= 1.0
    assert metadata["hybrid_pass_at_20"].value > 0.5, "planted facts are findable"
    strata = {t.stratum for t in tasks}
    assert strata == {"start", "middle", "end"}


def test_a_version_is_never_scored_with_another_embedder(world):
    from contextual_assets.cli.ingest_runs import failure_message
    from contextual_assets.embedding import Embedder

    class Retired(Embedder):
        """The same vectors, recorded under an embedder this deployment cannot load."""

        identity = "st:retired-embedder"

        def embed(self, texts):
            return world["embedder"].embed(texts)

    version = derive_version(world["store"], Retired(), world["good"], "unchanged", name="retired")
    result, checks, promoted = evaluate_and_promote(world, version)
    assert not result.success and "eval_gate" not in checks and promoted == []
    message = failure_message(result)
    assert f"cannot evaluate the candidate {version}" in message and "st:retired-embedder" in message, message


def test_a_regression_confined_to_one_document_fails_its_partition_and_blocks(world):
    store = world["store"]
    store.aliases.set("production", world["good"], "test setup")
    gold = load_gold(world["gold"])
    lost = [t for t in gold.tasks if t.evidence[0].doc_id == "incident_postmortem.pdf"]
    assert len(lost) == 2
    degraded = derive_version(store, world["embedder"], world["good"], remove_evidence(lost), name="one_document")
    result, checks, promoted = evaluate_and_promote(world, degraded)
    assert not checks["eval_gate"].passed and promoted == [] and store.aliases.get("production") == world["good"]
    partitions = document_checks(result)
    (regressed,) = [key for key, check in partitions.items() if not check.passed
                    and check.severity == dg.AssetCheckSeverity.ERROR]
    assert regressed.endswith("incident_postmortem.pdf")
    assert f"document {regressed}: 2 of its 2 tasks left the top 20" in checks["eval_gate"].metadata["reasons"].value
    # Every other document with gold tasks passed; those without say so (a warning, not a silent pass).
    keyed = {e.materialization.partition: e.materialization.metadata
             for e in result.get_asset_materialization_events()
             if e.materialization.asset_key.to_user_string() == "retrieval_eval"}
    assert set(keyed) == set(world["instance"].get_dynamic_partitions("documents"))
    for key, check in partitions.items():
        if key == regressed:
            assert keyed[key]["verdict"].value == "regressed" and "ranks" in keyed[key]
        elif keyed[key]["gold_tasks"].value == 0:
            assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
            assert keyed[key]["verdict"].value == "no gold task"
        else:
            assert check.passed, (key, check.description)


def test_the_gate_refuses_partitions_missing_or_evaluated_against_another_state(world):
    """candidate_evaluation on its own decides nothing for a candidate whose partitions were never
    evaluated, or were evaluated before the candidate changed."""
    from contextual_assets.cli.ingest_runs import failure_message

    store = world["store"]
    store.aliases.set("production", world["good"], "test setup")
    fresh = derive_version(store, world["embedder"], world["good"], "unchanged", name="never_evaluated")
    config = {"config": {"gold_path": str(world["gold"]), "index_version": fresh}}
    alone = world["defs"].resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world["instance"], raise_on_error=False, asset_selection=[dg.AssetKey("candidate_evaluation")],
        run_config={"ops": {"candidate_evaluation": config}})
    assert not alone.success
    assert "not evaluated for " + fresh in failure_message(alone), failure_message(alone)

    result, checks, promoted = evaluate_and_promote(world, fresh)
    assert checks["eval_gate"].passed and promoted
    # The candidate changes after its evaluation (a document re-ingested): its evaluation is stale.
    (document, *_) = store.corpus.documents(fresh)
    chunks = store.corpus.chunks(fresh, document.doc_id)
    from contextual_assets.models import EmbeddedChunk

    vectors = world["embedder"].embed([f"{c.header}\n\n{c.text}" for c in chunks])
    store.corpus.replace_document(document.model_copy(update={"updated_at": "2999-01-01T00:00:00"}),
                                  [EmbeddedChunk(**c.model_dump(), embedding=v) for c, v in zip(chunks, vectors)])
    again = world["defs"].resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world["instance"], raise_on_error=False, asset_selection=[dg.AssetKey("candidate_evaluation")],
        run_config={"ops": {"candidate_evaluation": config}})
    assert not again.success and "evaluated against another state" in failure_message(again)
