"""Gold hygiene: a task whose document is not in the index is *stale*; one whose evidence no longer
occurs in its document is *broken*. Both are reported apart and excluded from pass rates."""

from __future__ import annotations

from collections import defaultdict

from contextual_assets.models import HeaderedChunk, SearchHit

from .gold_set import GoldSet, GoldTask, normalise

LIVING, STALE, BROKEN = "living", "stale", "broken"


class IndexText:
    """Normalised text of every document of one index version, keyed by partition key and by
    logical document id (pre-chunked imports), so evidence can be looked up either way."""

    def __init__(self, hits: list[HeaderedChunk] | list[SearchHit]):
        parts: dict[str, list[str]] = defaultdict(list)
        for hit in sorted(hits, key=lambda h: (h.doc_id, h.ordinal)):
            parts[hit.doc_id].append(hit.text)
            if hit.source_doc != hit.doc_id:
                parts[hit.source_doc].append(hit.text)
        self.documents = {doc: normalise("\n".join(texts)) for doc, texts in parts.items()}
        self.chunks = [normalise(h.text) for h in hits]

    def find_document(self, doc_id: str) -> str | None:
        if doc_id in self.documents:
            return doc_id
        suffix = "/" + doc_id
        matches = [d for d in self.documents if d.endswith(suffix)]
        return matches[0] if len(matches) == 1 else None

    def contains(self, text: str, doc_id: str | None) -> bool:
        span = normalise(text)
        if doc_id is not None:
            return span in self.documents[doc_id]
        return any(span in document for document in self.documents.values())


def task_status(task: GoldTask, index: IndexText) -> str:
    status = LIVING
    for evidence in task.evidence:
        doc = None
        if evidence.doc_id is not None:
            doc = index.find_document(evidence.doc_id)
            if doc is None:
                return STALE
        if not index.contains(evidence.text, doc):
            status = BROKEN
    return status


def classify(gold: GoldSet, hits: list[HeaderedChunk] | list[SearchHit]) -> dict[str, str]:
    index = IndexText(hits)
    return {task.id: task_status(task, index) for task in gold.tasks}
