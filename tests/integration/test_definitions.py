"""The code location as Dagster's own tooling loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from contextual_assets.definitions import build_definitions
from tests.support import REPO_ROOT


def validate_code_location(tmp_path, **variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_"))}
    env.update({"DAGSTER_HOME": str(tmp_path), **variables})
    dagster_cli = Path(sys.executable).parent / "dagster"
    return subprocess.run([str(dagster_cli), "definitions", "validate", "-w", "workspace.yaml"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_dagster_definitions_validate(tmp_path):
    result = validate_code_location(tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Validation successful for code location contextual_retrieval" in result.stdout + result.stderr


def test_a_bad_setting_is_a_code_location_load_error_with_one_line_naming_it(tmp_path):
    """A bad setting fails the code location's load (the UI shows it as the location's error), never
    the process: the error's message is the one line naming the variable."""
    result = validate_code_location(tmp_path, CTX_LLM_MAX_IN_FLIGHT="-1")
    output = result.stdout + result.stderr
    assert "Validation failed for code location contextual_retrieval" in output, output[-4000:]
    lines = [line for line in output.splitlines() if "CTX_LLM_MAX_IN_FLIGHT" in line]
    assert len(lines) == 1 and lines[0].startswith("contextual_assets.errors.ConfigurationError: "), lines
    assert "is not valid" in lines[0] and ">= 0" in lines[0]


def dg_check_defs(tmp_path, **variables: str) -> subprocess.CompletedProcess:
    """`dg check defs` from the dev extra, in this interpreter's environment."""
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_"))}
    env.update({"DAGSTER_HOME": str(tmp_path), "VIRTUAL_ENV": sys.prefix, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}",
                **variables})
    return subprocess.run([str(bin_dir / "dg"), "check", "defs"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_dg_check_defs(tmp_path):
    """The project is a `dg` project: `[tool.dg]` in pyproject.toml, definitions from the defs folder."""
    result = dg_check_defs(tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "All definitions loaded successfully" in result.stdout + result.stderr


def test_dg_check_defs_names_a_bad_setting(tmp_path):
    result = dg_check_defs(tmp_path, CTX_PARTITIONS_PER_RUN="0")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert "CTX_PARTITIONS_PER_RUN='0' is not valid" in output, output[-4000:]


def test_the_defs_folder_and_build_definitions_agree(settings_factory):
    """`build_definitions(settings)` (the CLI, tests) loads the same folder as the code location."""
    from contextual_assets.definitions import defs as lazy_defs

    built = build_definitions(settings_factory())
    loaded = lazy_defs()
    assert {k for k in built.resolve_all_asset_keys()} == {k for k in loaded.resolve_all_asset_keys()}
    assert {j.name for j in built.jobs} == {j.name for j in loaded.jobs} == {
        "ingest_documents", "evaluate_and_promote", "check_production_freshness"}
    assert sorted(built.resources) == sorted(loaded.resources)


def test_card_assets_groups_kinds_and_partitions(settings_factory):
    defs = build_definitions(settings_factory())
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == {"parsed_chunks", "chunk_headers", "chunk_embeddings", "retrieval_eval", "candidate_evaluation",
                    "promoted_index"}
    checks = {key.name for key in graph.asset_check_keys}
    assert checks == {"document_gate", "eval_gate", "header_integrity", "gold_hygiene", "header_diagnostics",
                      "production_freshness"}
    for name in ("parsed_chunks", "chunk_headers", "chunk_embeddings", "retrieval_eval"):
        node = graph.get(dg.AssetKey(name))
        assert node.group_name == ("evaluation" if name == "retrieval_eval" else "ingest") and node.kinds
        assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
        assert node.partitions_def.name == "documents"
    assert graph.get(dg.AssetKey("candidate_evaluation")).partitions_def is None
    assert graph.get(dg.AssetKey("retrieval_eval")).automation_condition is None, "no gold file: nothing to follow"
    # The promotion waits for the whole-candidate checks: both block.
    blocking = {key.name for key in graph.asset_check_keys if graph.get_check_spec(key).blocking}
    assert blocking == {"eval_gate", "header_integrity"}
    assert defs.resolve_sensor_def("new_documents").job_name == "ingest_documents"


def test_with_a_gold_file_ingest_of_a_document_requests_its_evaluation_partition(settings_factory, tmp_path):
    """retrieval_eval follows ingest (an eager automation condition): a document's new chunk_embeddings
    materialization requests its evaluation partition, and only that one."""
    defs = build_definitions(settings_factory(gold_path=str(tmp_path / "gold.jsonl")))
    assert defs.resolve_asset_graph().get(dg.AssetKey("retrieval_eval")).automation_condition is not None
    sensor = defs.resolve_sensor_def("evaluation_follows_ingest")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", ["a.md", "b.md"])
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        instance.report_runless_asset_event(dg.AssetMaterialization("chunk_embeddings", partition="b.md"))
        after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        requested = after.get_requested_partitions(dg.AssetKey("retrieval_eval"))
        assert requested == {"b.md"}, requested


def test_ingest_step_runs_many_partitions_in_the_ingest_pool(settings_factory):
    """A backfill puts CTX_PARTITIONS_PER_RUN partitions in one run; the step is in pool
    `ctx_ingest`, which the shipped dagster.yaml limits to two slots with run granularity."""
    import yaml

    defs = build_definitions(settings_factory(partitions_per_run=7))
    ingest = defs.resolve_assets_def(dg.AssetKey("chunk_embeddings"))
    assert ingest.keys == {dg.AssetKey(k) for k in ("parsed_chunks", "chunk_headers", "chunk_embeddings")}
    assert ingest.backfill_policy == dg.BackfillPolicy.multi_run(max_partitions_per_run=7)
    assert ingest.op.pool == "ctx_ingest"
    shipped = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())
    assert shipped["concurrency"]["pools"] == {"default_limit": 2, "granularity": "run"}
    with dg.instance_for_test(overrides={"concurrency": shipped["concurrency"]}) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 2 and config.pool_config.pool_granularity.value == "run"
