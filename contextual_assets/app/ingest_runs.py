"""Driving ingest through the Dagster definitions and instance (used by `ctx` and benchmarks)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import dagster as dg
from pydantic import BaseModel

from contextual_assets.defs.partitions import (
    documents_partitions,
    partition_ranges,
    range_run_tags,
)
from contextual_assets.errors import DocumentError
from contextual_assets.ingest.document_keys import key_for_path, partition_key_for
from contextual_assets.ingest.inbox import file_sha256
from contextual_assets.models import SourceRecord
from contextual_assets.parsing import SUPPORTED_EXTENSIONS
from contextual_assets.store import ChunkStore

REPO_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"  # the checkout's instance settings


class PartitionOutcome(BaseModel):
    key: str
    path: str
    success: bool
    run_id: str | None = None
    chunks: int = 0
    error: str | None = None


def ensure_dagster_home(ctx_home: str) -> Path:
    """DAGSTER_HOME, defaulting to <CTX_HOME>/dagster, seeded with the shipped dagster.yaml."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path(ctx_home, "dagster")).absolute()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    if not (home / "dagster.yaml").exists() and REPO_DAGSTER_YAML.exists():
        shutil.copyfile(REPO_DAGSTER_YAML, home / "dagster.yaml")
    return home


def collect_sources(paths: Iterable[str | Path]) -> tuple[list[tuple[str, Path]], list[str]]:
    """Files to ingest with their partition keys: a file's key is its name, a directory's files are
    keyed `<dir name>/<relative path>`. Returns (sources, refusals)."""
    sources: list[tuple[str, Path]] = []
    refused: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            # Hidden files and folders (.git, .cache, editor swap files) are skipped, as the sensor does.
            for file in sorted(p for p in path.rglob("*")
                               if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)):
                if file.suffix.lower() not in SUPPORTED_EXTENSIONS:
                    refused.append(f"{file}: unsupported file type '{file.suffix}', skipped")
                    continue
                try:
                    key = key_for_path(file, path)
                except DocumentError as exc:
                    refused.append(str(exc))
                    continue
                sources.append((partition_key_for(f"{path.absolute().name}/{key}"), file))
        elif path.exists():
            sources.append((partition_key_for(path.name), path))
        else:
            refused.append(f"{path}: no such file or directory")
    unique: dict[str, Path] = {}
    for key, path in sources:
        if key in unique and unique[key].resolve() != path.resolve():
            refused.append(f"{path}: same document key '{key}' as {unique[key]}; ingest one of them, or their "
                           "parent folders, so the keys differ")
            continue
        unique.setdefault(key, path)
    return list(unique.items()), refused


def register_sources(store: ChunkStore, instance: dg.DagsterInstance, sources: list[tuple[str, Path]]) -> None:
    for key, path in sources:
        # The resolved path: the file is read without following links, so a file swapped for a
        # symlink after registration is refused instead of read wherever it points.
        store.register_source(SourceRecord(doc_id=key, path=str(path.resolve()), file_hash=file_sha256(path)))
    instance.add_dynamic_partitions(documents_partitions.name, [key for key, _ in sources])


def ingest_partitions(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    sources: list[tuple[str, Path]],
    on_done: Callable[[PartitionOutcome], None] | None = None,
    log_level: str = "INFO",
) -> list[PartitionOutcome]:
    """Runs in this process, recorded in the instance: the documents grouped into partition ranges
    as a backfill would (contiguous in the partitions' order, at most the asset's backfill policy's
    partitions per run), so that their header requests are pipelined across documents."""
    job = defs.resolve_job_def("ingest_documents")
    policy = defs.resolve_assets_def(dg.AssetKey("chunk_embeddings")).backfill_policy
    per_run = (policy.max_partitions_per_run if policy else None) or len(sources) or 1
    paths = dict(sources)
    outcomes: list[PartitionOutcome] = []
    for keys in partition_ranges(instance.get_dynamic_partitions(documents_partitions.name), list(paths), per_run):
        tags = {"ctx/trigger": "cli"}
        if len(keys) == 1:
            range_kwargs: dict = {"partition_key": keys[0]}
        else:
            range_kwargs = {}
            tags.update(range_run_tags(keys))
        result = job.execute_in_process(
            instance=instance, raise_on_error=False, tags=tags,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}, **range_kwargs,
        )
        committed: dict[str, int] = {}
        for event in result.get_asset_materialization_events():
            materialization = event.step_materialization_data.materialization
            if materialization and materialization.asset_key.path[-1] == "chunk_embeddings":
                value = materialization.metadata.get("chunks")
                committed[materialization.partition] = int(value.value) if value is not None else 0
        failed = failed_documents(result)
        for key in keys:
            outcome = PartitionOutcome(key=key, path=str(paths[key]), success=key in committed, run_id=result.run_id,
                                       chunks=committed.get(key, 0))
            if not outcome.success:
                outcome.error = failed.get(key) or failure_message(result)
            outcomes.append(outcome)
            if on_done:
                on_done(outcome)
    return outcomes


def failed_documents(result) -> dict[str, str]:
    """Per-document errors that the ingest step put in its failure's metadata."""
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.step_failure_data
            if data and data.user_failure_data and "failed_documents" in data.user_failure_data.metadata:
                value = data.user_failure_data.metadata["failed_documents"].value
                return {key: str(item.get("error")) for key, item in value.items()}
    return {}


def failure_message(result) -> str:
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.step_failure_data
            if data and data.error:
                # Dagster wraps what the step raised ("Error occurred while executing op ..."): the
                # user-facing reason is the innermost cause, e.g. a StoreError naming the database.
                error = data.error
                while error.cause is not None and error.cls_name.startswith("Dagster"):
                    error = error.cause
                message = error.message.strip()
                if message.startswith("contextual_assets.errors."):
                    message = message.removeprefix("contextual_assets.errors.")
                # dg.Failure's description is the user-facing message.
                if data.user_failure_data and data.user_failure_data.description:
                    message = data.user_failure_data.description
                return message.splitlines()[0] if message else "step failed"
    return "run failed"
