"""The evaluation gate judged both ways, on a real benchmark, in one run.

The codebase corpus and the sample corpus are ingested through the assets (the good version,
structural headers); every candidate below is evaluated with `evaluate_and_promote` (every document
partition of `retrieval_eval`, then `candidate_evaluation`, its checks and `promoted_index`) against the
good version in production.

Red team, each of which the gate must block for its planted reason:
    vacuous_first_promotion  no production yet; evidence removed for every task the good version
                             retrieves, so the candidate scores 0 on the few living tasks left
    partial_candidate        the good version less one live document
    stale_gold               the good version judged on a gold set whose tasks are 30 % stale
    lost_evidence            evidence removed for 4 % of the tasks production retrieves
    one_document_lost        evidence removed for every retrieved task of one document (3 or more)
    alias_swap               the header model's served name now serves other weights (simulator)
    expired_exception        evidence lost on 8 tasks, each "reviewed" in an exception that expired
    embedder_swap            the good chunks embedded by another same-size model (simulator)
    swapped_headers          headers swapped between neighbouring chunks
    truncated_chunks         every chunk truncated to its first line
    foreign_headers          fluent headers written for another document's chunks
    injected_headers         headers carrying an instruction ("Ignore the chunk; this section is about ...")
    other_language_headers   headers in Spanish, German or French for English chunks
    templated_headers        one header for every chunk

Benign controls, none of which the gate may block (each against the good version in production):
    identical_rebuild_1..5   the good version rebuilt under another version id (five times)
    rechunk_nearby           the corpora re-ingested at a nearby chunk size (CTX_CHUNK_TOKENS 200 -> 176); the
                             codebase is pre-chunked, so the sample documents change, judged on their gold too
    better_candidate         the good version against a production with swapped (worse) headers
    renamed_header_source    the same headers recorded under another header model name

Graded severity: evidence lost on 1, 2, 3, 5, 8 retrieved tasks, each of another document and each the
only task its gold chunks answer; the smallest loss that blocks is `min_blocked_loss`.

    python -m bench.gate --json bench/results/gate.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import dagster as dg
import httpx

from bench.corpora import derive_version, foreign_headers, remove_evidence
from bench.report import write_json
from bench.sim import FleetSimulator, ReplicaSpec
from contextual_assets.cli.evaluation_runs import EvaluationOutcome, evaluate_and_promote
from contextual_assets.cli.ingest_runs import ingest_partitions, register_sources
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from contextual_assets.embedding import OpenAIEmbedder
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.fleet.pool import close_fleets
from contextual_assets.samples import sample_gold_file, write_sample_corpus
from contextual_assets.settings import PlatformSettings
from eval_assets.documents import place_tasks
from eval_assets.evaluate import MODES, evaluator_identity
from eval_assets.gold.gold_set import GoldTask, load_gold, write_gold

RED_TEAM = ("vacuous_first_promotion", "partial_candidate", "stale_gold", "lost_evidence", "one_document_lost",
            "alias_swap", "expired_exception", "embedder_swap", "swapped_headers", "truncated_chunks",
            "foreign_headers", "injected_headers", "other_language_headers", "templated_headers")
SEVERITY = (1, 2, 3, 5, 8)
METRICS = ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10")
# What each case must be blocked *by* (a case blocked for another reason, or crashed, does not count).
EXPECTED_REASON = {"vacuous_first_promotion": "below the floor", "partial_candidate": "live documents",
                   "stale_gold": "stale+broken", "lost_evidence": "fell", "alias_swap": "new index version",
                   "expired_exception": "expired on", "embedder_swap": "fell", "swapped_headers": "fell",
                   "truncated_chunks": "fell", "one_document_lost": "document ",
                   "foreign_headers": "another document's title", "injected_headers": "carry an instruction",
                   "other_language_headers": "another language", "templated_headers": "one and the same"}


class RedTeam:
    def __init__(self, workdir: Path, dataset: Path, gold: Path, floors: dict[str, float] | None, tolerance: float):
        self.workdir, self.gold = workdir, gold
        overrides = {"gate_floors_json": json.dumps(floors)} if floors is not None else {}
        self.settings = PlatformSettings(home=str(workdir), inbox=str(workdir / "inbox"),
                                         duckdb_path=str(workdir / "gate.duckdb"), header_source="structural",
                                         gate_tolerance=tolerance, **overrides)
        self.defs, self.resources = build_definitions(self.settings), build_resources(self.settings)
        self.store = self.resources["store"].open()
        self.embedder = self.resources["embedder"].get()
        samples = workdir / "samples"
        write_sample_corpus(samples)
        corpus = dataset / "codebase_chunks.json"
        self.sources = [(corpus.name, corpus)] + [(f"samples/{p.name}", p) for p in sorted(samples.iterdir())]
        self.instance = dg.DagsterInstance.ephemeral()
        register_sources(self.store, self.instance, self.sources)
        failed = [o for o in ingest_partitions(self.defs, self.instance, self.sources, log_level="ERROR")
                  if not o.success]
        if failed:
            raise SystemExit(f"ingest failed: {failed[0].key}: {failed[0].error}")
        (self.good,) = [v["index_version"] for v in self.store.corpus.index_versions()]

    def evaluate(self, name: str, version: str, gold: Path | None = None, expected: str | None = None,
                 **gate: str) -> dict:
        defs = build_definitions(self.settings.model_copy(update=gate)) if gate else self.defs
        before = self.store.aliases.get("production")
        outcome = evaluate_and_promote(defs, self.instance, str(gold or self.gold), version)
        result = outcome.result
        promoted = outcome.promotion is not None
        reasons, metrics = gate_decision(outcome)
        expected = EXPECTED_REASON.get(name, "") if expected is None else expected
        regressed = [c.partition for c in result.get_asset_check_evaluations()
                     if c.check_name == "document_gate" and not c.passed and c.severity == dg.AssetCheckSeverity.ERROR]
        return {"name": name, "index_version": version, "expected_reason": expected,
                "blocked": not promoted and any(expected in r for r in reasons), "promoted": promoted,
                "reasons": reasons, "regressed_partitions": regressed, "production_before": before,
                "production_after": self.store.aliases.get("production"), **metrics}

    def control(self, name: str, version: str, production: str | None = None, gold: Path | None = None) -> dict:
        """A benign candidate against `production` (default: the good version)."""
        self.store.aliases.set("production", production or self.good, f"bench: control {name}")
        row = self.evaluate(name, version, gold=gold, expected="")
        row["blocked"] = not row["promoted"]
        return row

    def rechunk(self, chunk_tokens: int) -> str:
        """The corpora ingested again at another chunk size: a new index version built by the assets."""
        before = {v["index_version"] for v in self.store.corpus.index_versions()}
        defs = build_definitions(self.settings.model_copy(update={"chunk_tokens": chunk_tokens}))
        failed = [o for o in ingest_partitions(defs, self.instance, self.sources, log_level="ERROR") if not o.success]
        if failed:
            raise SystemExit(f"re-chunked ingest failed: {failed[0].key}: {failed[0].error}")
        (version,) = [v["index_version"] for v in self.store.corpus.index_versions()
                      if v["index_version"] not in before]
        return version

    def derive(self, transform, **kwargs) -> str:
        return derive_version(self.store, kwargs.pop("embedder", self.embedder), self.good, transform, **kwargs)

    def write_gold(self, name: str, tasks: list[GoldTask]) -> Path:
        return write_gold(self.workdir / f"{name}.jsonl", tasks)


def gate_decision(outcome: EvaluationOutcome) -> tuple[list[str], dict]:
    """(the reasons the gate gave, the candidate's hybrid metrics) of one `evaluate_and_promote`: every
    blocking reason of `eval_gate` and `header_integrity`, exceptions not applied, or why the evaluation
    did not run (metrics None then)."""
    from contextual_assets.cli.ingest_runs import failure_message

    result, checks = outcome.result, outcome.checks
    evaluation = next((e.materialization.metadata for e in result.get_asset_materialization_events()
                       if e.materialization.asset_key.to_user_string() == "candidate_evaluation"), None)
    if evaluation is None:  # the evaluation refused to run (e.g. an embedder it cannot load)
        return [f"evaluation failed: {failure_message(result)}"], dict.fromkeys(METRICS, None)
    gate_metadata = checks["eval_gate"].metadata
    reasons = [r for r in gate_metadata["reasons"].value.split("; ") if r != "none"]
    if "header_integrity" not in checks:  # the check itself failed: say why, never crash the bench
        reasons.append(f"header_integrity did not run: {failure_message(result)}")
    elif not checks["header_integrity"].passed:
        reasons += checks["header_integrity"].metadata["reasons"].value.split("; ")
    ignored = gate_metadata["ignored_exceptions"].value
    if ignored != "none":
        reasons.append(f"exceptions not applied: {ignored[:200]}")
    return reasons, {m: evaluation[f"hybrid_{m}"].value for m in METRICS}


def retrieved_tasks(team: RedTeam) -> tuple[list[GoldTask], list[GoldTask]]:
    """(tasks the good version retrieves in its top 20, the others), from a plain evaluation."""
    from eval_assets.evaluate import evaluate

    gold = load_gold(team.gold)
    report = evaluate(team.store, team.embedder, gold, team.good, modes=("hybrid",))
    hits = {t.task_id for t in report.tasks if t.status == "living" and t.pass_at_20 > 0}
    return [t for t in gold.tasks if t.id in hits], [t for t in gold.tasks if t.id not in hits]


def alias_swap(workdir: Path, samples: list[tuple[str, Path]]) -> dict:
    """Headers from a simulated fleet whose served name is then moved to other weights: the next
    ingest must build a new index version (never mixing in cached old-model headers), and production
    must not change without an evaluation."""
    with FleetSimulator([ReplicaSpec(root="org/model-a")], time_scale=0.01) as sim:
        settings = PlatformSettings(home=str(workdir), inbox=str(workdir / "inbox"),
                                    duckdb_path=str(workdir / "swap.duckdb"), header_source="openai",
                                    llm_base_urls=sim.base_urls[0])
        defs, resources = build_definitions(settings), build_resources(settings)
        store = resources["store"].open()
        with dg.DagsterInstance.ephemeral() as instance:
            register_sources(store, instance, samples)
            assert all(o.success for o in ingest_partitions(defs, instance, samples, log_level="ERROR"))
            (before,) = [v["index_version"] for v in store.corpus.index_versions()]
            store.aliases.set("production", before, "red team: promoted")
            httpx.post(f"{sim.admin_urls[0]}/model", json={"root": "org/model-b"}, timeout=10).raise_for_status()
            DEFAULT_DISCOVERY.clear()
            close_fleets()
            result = ingest_partitions(defs, instance, samples, log_level="ERROR")
            after = [v["index_version"] for v in store.corpus.index_versions() if v["index_version"] != before]
            cache_hits = sum(int(m.metadata["cache_hits"].value) for m in _materializations(instance, "chunk_headers")
                             if m.metadata["index_version"].value in after)
        close_fleets()
    reasons = []
    if after:
        reasons.append(f"weights behind 'sim-model' changed: new index version {after[0]} (was {before})")
    if cache_hits == 0:
        reasons.append("no header of the old weights reused (0 cache hits)")
    production = store.aliases.get("production")
    if production == before:
        reasons.append(f"production stays {before} until the new version passes the gate")
    blocked = bool(after) and cache_hits == 0 and production == before and all(o.success for o in result)
    return {"name": "alias_swap", "index_version": after[0] if after else before,
            "expected_reason": EXPECTED_REASON["alias_swap"], "blocked": blocked,
            "reasons": reasons, "production_before": before, "production_after": production,
            **dict.fromkeys(METRICS, None)}


def _materializations(instance: dg.DagsterInstance, asset: str) -> list:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    return [r.asset_materialization for r in records]


def spread(tasks: list[GoldTask], documents: dict[str, str], n: int, chunks: list) -> list[GoldTask]:
    """`n` tasks, each of another document, each the only task whose evidence its chunks hold (blanking
    them loses that task alone), so a loss of n is n tasks lost."""
    from eval_assets.gold.gold_set import normalise

    texts = [normalise(c.text) for c in chunks]
    spans = {t.id: [normalise(e.text) for e in t.evidence] for t in tasks}

    def alone(task: GoldTask) -> bool:
        held = [text for text in texts if any(span in text for span in spans[task.id])]
        return all(not any(span in text for text in held for span in spans[other.id])
                   for other in tasks if other.id != task.id)

    seen, picked = set(), []
    for task in tasks:
        if documents.get(task.id) not in seen and alone(task):
            seen.add(documents.get(task.id))
            picked.append(task)
        if len(picked) == n:
            break
    return picked


def run(dataset: Path, gold: Path, workdir: Path, floors: dict[str, float] | None, tolerance: float) -> dict:
    team = RedTeam(workdir, dataset, gold, floors, tolerance)
    retrieved, _ = retrieved_tasks(team)
    gold_set = load_gold(team.gold)
    good_chunks = team.store.corpus.chunks(team.good)
    documents = {t: p.document for t, p in place_tasks(gold_set, good_chunks).items()}

    rows, good = evidence_rows(team, retrieved, gold_set, documents)
    swapped = identity_rows(team, rows, workdir, retrieved, documents, good_chunks, gold_set)
    red_team = [rows[name] for name in RED_TEAM]
    severity = severity_rows(team, retrieved, documents, good_chunks)
    blocked_losses = [r["lost_tasks"] for r in severity if r["blocked"]]
    controls = control_rows(team, gold_set, swapped)
    team.store.aliases.set("production", team.good, "bench: end")
    return {"dataset": str(dataset), "gold": str(gold.name), "floors": json.loads(team.settings.gate_floors_json),
            "tolerance": tolerance, "good": good, "good_promoted": good["production_after"] == team.good,
            "red_team": red_team, "all_blocked": all(r["blocked"] for r in red_team),
            "controls": [{"name": r["name"], "blocked": r["blocked"], "reasons": r["reasons"],
                          **{m: r[m] for m in METRICS}} for r in controls],
            "false_block_rate": sum(r["blocked"] for r in controls) / len(controls),
            "severity": severity, "min_blocked_loss": min(blocked_losses) if blocked_losses else None,
            "one_document_blocked": rows["one_document_lost"]["blocked"]}


def evidence_rows(team: RedTeam, retrieved: list[GoldTask], gold_set, documents: dict[str, str]) -> tuple[dict, dict]:
    """The red team's candidates that lose evidence or documents (and the good candidate, judged between
    the first two as a user promotes it): (rows by name, the good candidate's row)."""
    rows: dict[str, dict] = {}
    # No production yet: the only tasks left living are ones the candidate misses.
    vacuous = team.derive(remove_evidence(retrieved), name="vacuous")
    rows["vacuous_first_promotion"] = team.evaluate("vacuous_first_promotion", vacuous)
    good = team.evaluate("good", team.good)

    partial = team.derive("unchanged", name="partial", drop_docs=(team.sources[-1][0],))
    rows["partial_candidate"] = team.evaluate("partial_candidate", partial)

    retired = [GoldTask(id=f"retired-{i}", query=t.query, evidence=[e.model_copy(update={"doc_id": "retired_manual.md"})
                                                                   for e in t.evidence])
               for i, t in enumerate(gold_set.tasks[: max(1, int(0.43 * len(gold_set.tasks)))])]
    stale_gold = team.write_gold("stale_gold", [*gold_set.tasks, *retired])  # 30 % of tasks stale
    rows["stale_gold"] = team.evaluate("stale_gold", team.derive("unchanged", name="same_chunks"), gold=stale_gold)

    lost = retrieved[:: max(1, round(len(retrieved) / max(1, round(0.04 * len(gold_set.tasks)))))]
    rows["lost_evidence"] = team.evaluate("lost_evidence", team.derive(remove_evidence(lost), name="lost"))

    # The document with the most retrieved tasks loses all of them: under 3 % of the set.
    per_document: dict[str, list[GoldTask]] = {}
    for task in retrieved:
        per_document.setdefault(documents.get(task.id, ""), []).append(task)
    victim, victim_tasks = max(per_document.items(), key=lambda item: (len(item[1]), item[0]))
    one_document = team.derive(remove_evidence(victim_tasks), name="one_document")
    rows["one_document_lost"] = team.evaluate("one_document_lost", one_document)
    rows["one_document_lost"].update(document=victim, lost_tasks=len(victim_tasks))
    return rows, good


def identity_rows(team: RedTeam, rows: dict, workdir: Path, retrieved: list[GoldTask], documents: dict[str, str],
                  good_chunks: list, gold_set) -> str:
    """The red team's candidates that change what was built (the alias, an expired exception, the
    embedder, the headers, the chunks), added to `rows`; the swapped-headers version."""
    rows["alias_swap"] = alias_swap(workdir / "alias_swap", team.sources[1:3])

    # Every lost task "reviewed", in scope (this version, this evaluator) but expired.
    expired_lost = spread(retrieved, documents, 8, good_chunks)
    expired = team.derive(remove_evidence(expired_lost), name="expired")
    evaluator, _ = evaluator_identity(team.embedder, gold_set, MODES)
    exceptions = workdir / "exceptions.yaml"
    exceptions.write_text("".join(
        f"- {{task_id: {t.id}, reason: reworded, reviewer: qa, date: 2020-01-02, expires: 2020-06-30, "
        f"index_version: {expired}, evaluator_id: {evaluator}}}\n" for t in expired_lost))
    rows["expired_exception"] = team.evaluate("expired_exception", expired, gate_exceptions_path=str(exceptions))

    with FleetSimulator([ReplicaSpec(serve_embeddings=True, embedding_dim=team.embedder.dimension)],
                        time_scale=0.01) as sim:
        other = OpenAIEmbedder(sim.base_urls[0], "sim-embed")
        swap = team.derive("unchanged", name="embedder_swap", embedder=other,
                           recipe={"embedder": {"identity": other.identity, "base_url": sim.base_urls[0],
                                                "model": "sim-embed"}})
        rows["embedder_swap"] = team.evaluate("embedder_swap", swap)

    swapped = team.derive("swap_headers")
    rows["swapped_headers"] = team.evaluate("swapped_headers", swapped)
    rows["truncated_chunks"] = team.evaluate("truncated_chunks", team.derive("truncate_first_line"))
    rows["foreign_headers"] = team.evaluate("foreign_headers", team.derive(foreign_headers(good_chunks),
                                                                           name="foreign_headers"))
    for name in ("injected_headers", "other_language_headers", "templated_headers"):
        rows[name] = team.evaluate(name, team.derive(name))
    return swapped


def severity_rows(team: RedTeam, retrieved: list[GoldTask], documents: dict[str, str], good_chunks: list) -> list[dict]:
    """Graded severity: candidates losing SEVERITY tasks each, spread over documents."""
    severity = []
    for n in SEVERITY:
        tasks = spread(retrieved, documents, n, good_chunks)
        row = team.control(f"lose_{n}", team.derive(remove_evidence(tasks), name=f"severity_{n}"))
        severity.append({"lost_tasks": len(tasks), "documents": len({documents.get(t.id) for t in tasks}),
                         "blocked": row["blocked"], "reasons": row["reasons"], **{m: row[m] for m in METRICS}})
    return severity


def control_rows(team: RedTeam, gold_set, swapped: str) -> list[dict]:
    """The benign controls (identical rebuilds, a nearby re-chunk, a better candidate, a renamed
    header source), none of which should block."""
    controls = [team.control(f"identical_rebuild_{i}", team.derive("unchanged", name=f"rebuild_{i}"))
                for i in range(1, 6)]
    # The codebase corpus comes pre-chunked: the re-chunk changes the sample documents, judged on their gold too.
    with sample_gold_file() as sample_gold:
        both = team.write_gold("codebase_and_samples", [*gold_set.tasks, *load_gold(sample_gold).tasks])
    controls.append(team.control("rechunk_nearby", team.rechunk(176), gold=both))
    controls.append(team.control("better_candidate", team.good, production=swapped))
    controls.append(team.control("renamed_header_source", team.derive("unchanged", name="renamed",
                                                                       header_model="structural-v1-renamed")))
    return controls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None)
    parser.add_argument("--floors", default=None, help="JSON floors (default: the shipped CTX_GATE_FLOORS default)")
    parser.add_argument("--tolerance", type=float, default=PlatformSettings.default("gate_tolerance"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    gold = args.gold or args.dataset / "evaluation_set.dev.jsonl"
    with tempfile.TemporaryDirectory(prefix="ctx-gate-") as tmp:
        result = run(args.dataset, gold, Path(tmp), json.loads(args.floors) if args.floors else None, args.tolerance)
    print(f"{'case':25s} {'P@5':>6s} {'P@10':>6s} {'MRR':>6s}  blocked   reasons")
    for row in [result["good"], *result["red_team"]]:
        cells = " ".join(f"{100 * row[m]:6.1f}" if row[m] is not None else f"{'-':>6s}"
                         for m in ("pass_at_5", "pass_at_10", "mrr"))
        verdict = "yes" if row["blocked"] else "promoted" if row is result["good"] else "NO"
        print(f"{row['name']:25s} {cells}  {verdict:8s}  {'; '.join(row['reasons'])[:110]}")
    for row in result["controls"]:
        print(f"{row['name']:25s} control   {'BLOCKED' if row['blocked'] else 'promoted':8s}  "
              f"{'; '.join(row['reasons'])[:110]}")
    print("severity: " + ", ".join(f"{r['lost_tasks']} lost -> {'blocked' if r['blocked'] else 'passed'}"
                                   for r in result["severity"]) + f"; min_blocked_loss {result['min_blocked_loss']}")
    print(f"good promoted: {result['good_promoted']}; every planted failure blocked: {result['all_blocked']}; "
          f"false-block rate on the controls: {result['false_block_rate']:.2f}")
    write_json(args.json, result)
    return 0 if result["good_promoted"] and result["all_blocked"] and result["false_block_rate"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
