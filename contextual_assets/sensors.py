"""`new_documents`: the inbox folder drives the `documents` partitions."""


import os
from pathlib import Path

import dagster as dg

from .assets import documents_partitions
from .inbox import InboxState, scan_inbox
from .models import SourceRecord
from .resources import ChunkStoreResource


def build_new_documents_sensor(job, inbox: str, interval_s: int = 15):
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
        run_requests: list[dg.RunRequest] = []
        for key, entry in sorted(current.entries.items()):
            old = previous.entries.get(key)
            if key in added or old is None or old.sha256 != entry.sha256:
                # The resolved path: a file swapped for a symlink later is refused when read.
                chunk_store.register_source(SourceRecord(doc_id=key, path=str(Path(entry.path).resolve()),
                                                         file_hash=entry.sha256))
                # run_key makes a repeated tick idempotent: the same content is never requested twice.
                run_requests.append(
                    dg.RunRequest(run_key=f"{key}@{entry.sha256[:16]}@{entry.mtime_ns}", partition_key=key,
                                  tags={"ctx/trigger": "inbox", "ctx/file_sha256": entry.sha256})
                )
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
