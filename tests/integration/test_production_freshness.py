"""Production never silently falls behind: after the header settings change, new and edited documents
reach production too while its recorded recipe still builds it; when it cannot (the weights behind
its model name changed), `ctx status --json` lists the lag and `production_freshness` warns. Through
the real CLI, Dagster and DuckDB; the second test uses the fleet simulator in its own process."""

from __future__ import annotations

import json
import os

import dagster as dg

from bench.sim.process import SimFleet
from tests.support import run_ctx

DOCS = {
    "alpha.md": "# Alpha valves\n\n## Maintenance\n\nThe alpha valve is greased every 90 days with silicone paste.\n",
    "beta.md": "# Beta pumps\n\n## Limits\n\nThe beta pump never runs above 3400 rpm in the northern depot.\n",
}
GOLD = [
    {"id": "a", "query": "how often is the alpha valve greased", "evidence": [
        {"text": "greased every 90 days", "doc_id": "alpha.md"}]},
    {"id": "b", "query": "beta pump speed limit", "evidence": [{"text": "never runs above 3400 rpm", "doc_id": "beta.md"}]},
]


def write_docs(folder, docs):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text)


def promote_current(env, tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(t) + "\n" for t in GOLD))
    evaluation = run_ctx(env, "eval", "--gold", str(gold))
    assert evaluation.returncode == 0, evaluation.stdout[-2000:] + evaluation.stderr[-2000:]
    status = json.loads(run_ctx(env, "status", "--json", check=True).stdout)
    assert status["production"] == status["current_index_version"]
    return status["production"]


def search_production(env, query):
    return json.loads(run_ctx(env, "search", query, "--json", "-k", "3", check=True).stdout)["hits"]


def test_new_and_edited_documents_reach_production_after_a_header_change(tmp_path, env):
    env = {**env, "CTX_HEADER_SOURCE": "structural", "CTX_SOURCE_ROOT": str(tmp_path)}
    docs = tmp_path / "docs"
    write_docs(docs, DOCS)
    run_ctx(env, "ingest", str(docs), check=True)
    production = promote_current(env, tmp_path)

    changed = {**env, "CTX_HEADER_SOURCE": "none"}  # a new candidate version; production stays buildable
    write_docs(docs, {"gamma.md": "# Gamma filters\n\n## Swap\n\nGamma filters are swapped after 1200 operating hours.\n",
                      "alpha.md": DOCS["alpha.md"].replace("90 days", "45 days")})
    ingest = run_ctx(changed, "ingest", str(docs), "--json", check=True)
    assert "live documents" not in ingest.stderr, ingest.stderr

    status = json.loads(run_ctx(changed, "status", "--json", check=True).stdout)
    assert status["production"] == production and status["current_index_version"] != production
    assert status["production_lag"]["missing"] == 0 and status["production_lag"]["outdated"] == 0, status
    versions = {v["index_version"]: v for v in status["index_versions"]}
    assert versions[production]["documents"] == 3 and versions[status["current_index_version"]]["documents"] == 3

    hits = search_production(changed, "when are gamma filters swapped")
    assert hits[0]["index_version"] == production and "1200 operating hours" in hits[0]["text"]
    hits = search_production(changed, "how often is the alpha valve greased")
    assert "45 days" in hits[0]["text"] and not any("90 days" in h["text"] for h in hits)


def test_production_that_cannot_be_built_shows_its_lag(tmp_path, env):
    sim = SimFleet.start(tmp_path, time_scale=0.02, speeds=(1.0,), root="weights-a")
    try:
        fleet_env = {**env, "CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": sim.base_urls[0],
                     "CTX_SOURCE_ROOT": str(tmp_path)}
        docs = tmp_path / "docs"
        write_docs(docs, DOCS)
        run_ctx(fleet_env, "ingest", str(docs), check=True)
        production = promote_current(fleet_env, tmp_path)
        # The name now serves other weights: production's headers can no longer be reproduced.
        sim.set_model(0, "weights-b")
        write_docs(docs, {"gamma.md": "# Gamma filters\n\n## Swap\n\nGamma filters are swapped after 1200 hours.\n"})
        ingest = run_ctx(fleet_env, "ingest", str(docs / "gamma.md"), check=True)
        assert "covers 2 of 3 live documents" in ingest.stderr and "gamma.md" in ingest.stderr, ingest.stderr
        assert "model name 'sim-model' now serves weights-b (it served weights-a" in ingest.stderr, ingest.stderr

        status = json.loads(run_ctx(fleet_env, "status", "--json", check=True).stdout)
        assert status["production"] == production != status["current_index_version"]
        assert status["production_lag"]["missing_ids"] == ["docs/gamma.md"], status["production_lag"]
        assert status["production_lag"]["outdated"] == 0

        from contextual_assets.cli.ingest_runs import ensure_dagster_home
        from contextual_assets.definitions import build_definitions
        from contextual_assets.settings import PlatformSettings

        os.environ.update({k: v for k, v in fleet_env.items() if k.startswith(("CTX_", "DAGSTER_HOME"))})
        try:
            settings = PlatformSettings.from_env()
            ensure_dagster_home(settings.home)
            with dg.DagsterInstance.get() as instance:
                result = build_definitions(settings).resolve_job_def("check_production_freshness").execute_in_process(
                    instance=instance, raise_on_error=False)
            (check,) = [e.asset_check_evaluation_data for e in result.all_events
                        if e.event_type_value == "ASSET_CHECK_EVALUATION"]
            assert check.check_name == "production_freshness" and not check.passed
            assert check.severity == dg.AssetCheckSeverity.WARN
            assert check.metadata["missing_ids"].value == "docs/gamma.md"
        finally:
            for key in fleet_env:
                if key.startswith(("CTX_", "DAGSTER_HOME")):
                    os.environ.pop(key, None)
    finally:
        sim.proc.terminate()
        sim.proc.wait(timeout=10)
