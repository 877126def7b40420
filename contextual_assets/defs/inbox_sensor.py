"""`new_documents`: the inbox folder drives the `documents` partitions."""


import hashlib
import os
from pathlib import Path

import dagster as dg

from contextual_assets.defs.partitions import (
    documents_partitions,
    partition_ranges,
    range_run_tags,
)
from contextual_assets.defs.resources import ChunkStoreResource
from contextual_assets.ingest.inbox import InboxState, scan_inbox
from contextual_assets.models import SourceRecord


def build_new_documents_sensor(job, inbox: str, partitions_per_run: int,
                               interval_s: int = 15) -> dg.SensorDefinition:
    @dg.sensor(
        name="new_documents",
        job=job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Adds, re-runs and removes document partitions from the inbox folder ({inbox}).",
    )
    def new_documents(context: dg.SensorEvaluationContext, store: ChunkStoreResource):
        previous = InboxState.model_validate_json(context.cursor) if context.cursor else InboxState()
        root = Path(inbox)
        if not root.is_dir():
            # A missing or unmounted inbox is not "every file was deleted": touch nothing.
            return dg.SkipReason(f"inbox {root} is missing or not a directory; nothing changed")
        current, refused = scan_inbox(root, previous)
        for reason in refused:
            context.log.warning(f"refused: {reason}")
        existing = set(context.instance.get_dynamic_partitions(documents_partitions.name))
        chunk_store = store.open()

        added = sorted(k for k in current.entries if k not in existing)
        # Removed only when the file is really gone (not merely unreadable for a moment).
        removed = sorted(k for k in existing if k not in current.entries and k in previous.entries
                         and not os.path.lexists(previous.entries[k].path))
        added_set = set(added)
        changed = {key: entry for key, entry in sorted(current.entries.items())
                   if key in added_set or key not in previous.entries
                   or previous.entries[key].sha256 != entry.sha256}
        # A key `ctx ingest` gave a file outside the inbox is not silently re-pointed at an inbox file.
        owners = {s.doc_id: s.path for s in chunk_store.list_sources() if s.doc_id in changed}
        for key, entry in list(changed.items()):
            owner = owners.get(key)
            if owner and owner != str(Path(entry.path).resolve()) and os.path.exists(owner) \
                    and not Path(owner).is_relative_to(root.resolve()):
                context.log.warning(f"refused: {entry.path}: document key '{key}' belongs to {owner} (ingested "
                                    "with ctx ingest); rename one of them")
                del changed[key]
        # One transaction for every new or changed file (one per file is minutes for 10,000 files on
        # DuckDB). The resolved path: a file swapped for a symlink later is refused when read.
        chunk_store.register_sources([SourceRecord(doc_id=key, path=str(Path(entry.path).resolve()),
                                                   file_hash=entry.sha256) for key, entry in changed.items()])
        # Several documents per run (as a backfill does): new partitions are appended in `added`
        # order, so they and runs of neighbouring changed ones form contiguous partition ranges.
        ordered = [k for k in context.instance.get_dynamic_partitions(documents_partitions.name)
                   if k not in added_set] + added
        run_requests: list[dg.RunRequest] = []
        for keys in partition_ranges(ordered, list(changed), partitions_per_run):
            # run_key makes a repeated tick idempotent: the same content is never requested twice.
            run_key = ";".join(f"{k}@{changed[k].sha256[:16]}@{changed[k].mtime_ns}" for k in keys)
            tags = {"ctx/trigger": "inbox", "ctx/documents": str(len(keys))}
            if len(keys) == 1:
                tags["ctx/file_sha256"] = changed[keys[0]].sha256
                run_requests.append(dg.RunRequest(run_key=run_key, partition_key=keys[0], tags=tags))
            else:
                run_key = f"{keys[0]}..{keys[-1]}#{hashlib.sha256(run_key.encode()).hexdigest()[:24]}"
                tags.update(range_run_tags(keys))
                run_requests.append(dg.RunRequest(run_key=run_key, tags=tags))
        for key in removed:
            purged = chunk_store.purge_document(key)
            context.log.info(f"{key}: file removed from the inbox; purged {purged} chunks")

        partition_requests = []
        if added:
            partition_requests.append(documents_partitions.build_add_request(added))
        if removed:
            partition_requests.append(documents_partitions.build_delete_request(removed))
        return dg.SensorResult(
            run_requests=run_requests,
            dynamic_partitions_requests=partition_requests,
            cursor=current.model_dump_json(),
        )

    return new_documents
