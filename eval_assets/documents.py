"""The gate per document: which document (and document partition) each gold task's evidence lies in,
and the per-document rule that blocks a regression confined to one document, which the whole-set
tolerance would let through. Pure functions over chunks and per-task rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from contextual_assets.models import HeaderedChunk

from .evaluate import DEPTH
from .gold.gold_set import GoldSet, GoldTask, normalise
from .gold.hygiene import IndexText

TOP_K = DEPTH  # a task is "found" within the evaluation depth; beyond it, a miss
MIN_DOCUMENT_LOSS = 2  # one task of one document leaving the top k is noise at this level; the aggregate judges it


@dataclass(frozen=True)
class TaskPlacement:
    """Where a task's evidence lies: the document partition (partition key) and the document named in
    results (the logical document of a pre-chunked import, else the partition key)."""

    partition: str
    document: str


@dataclass
class DocumentVerdict:
    document: str
    tasks: int  # tasks compared (living in production, or graded when there is no production)
    in_top_k_production: int
    in_top_k_candidate: int
    lost: list[str] = field(default_factory=list)  # in production's top k, out of the candidate's
    gained: list[str] = field(default_factory=list)  # the other way round
    reason: str = ""

    @property
    def passed(self) -> bool:
        return not self.reason


def _documents(chunks: Iterable[HeaderedChunk]) -> tuple[IndexText, dict[str, str]]:
    chunks = list(chunks)
    partition_of: dict[str, str] = {}
    for chunk in chunks:
        partition_of[chunk.doc_id] = chunk.doc_id
        partition_of.setdefault(chunk.source_doc, chunk.doc_id)
    return IndexText(chunks), partition_of


def _place(task: GoldTask, index: IndexText, partition_of: dict[str, str]) -> TaskPlacement | None:
    for evidence in task.evidence:
        if evidence.doc_id is not None:
            document = index.find_document(evidence.doc_id)
            if document is not None:
                return TaskPlacement(partition_of[document], document)
            continue
        span = normalise(evidence.text)
        holding = [document for document, text in index.documents.items() if span in text]
        if holding:
            # The finest: a logical document of a pre-chunked import rather than its whole file.
            document = min(holding, key=lambda d: (partition_of[d] == d, d))
            return TaskPlacement(partition_of[document], document)
    return None


def place_tasks(gold: GoldSet, *versions: Sequence[HeaderedChunk]) -> dict[str, TaskPlacement]:
    """{task id: where its evidence lies}, looked up in each version in turn (the candidate, then
    production: a task whose evidence the candidate lost is placed where production has it). Tasks
    found in no version are left out: gold hygiene reports them stale or broken."""
    placements: dict[str, TaskPlacement] = {}
    for chunks in versions:
        index, partition_of = _documents(chunks)
        for task in gold.tasks:
            if task.id not in placements:
                placement = _place(task, index, partition_of)
                if placement is not None:
                    placements[task.id] = placement
    return placements


def _in_top_k(row: Mapping | None, k: int) -> bool:
    return bool(row) and row["status"] == "living" and row["first_rank"] is not None and row["first_rank"] <= k


def document_verdicts(candidate: Sequence[Mapping], production: Sequence[Mapping] | None,
                      documents: Mapping[str, str], mode: str, excused: Iterable[str] = (),
                      k: int = TOP_K) -> dict[str, DocumentVerdict]:
    """The per-document rule, on per-task rows of one mode. A document blocks when at least
    MIN_DOCUMENT_LOSS of its tasks that production ranks in the top k are out of the candidate's top k
    (lost evidence included), net of its tasks that moved into the top k, and they are at least half of
    its compared tasks. Without a production nothing is compared: every document passes here and the
    floors judge the whole set. `documents`: {task id: document}; excused tasks (reviewed exceptions
    that apply) are not counted."""
    cand = {r["task_id"]: r for r in candidate if r["mode"] == mode}
    prod = {r["task_id"]: r for r in production if r["mode"] == mode} if production is not None else None
    excused = set(excused)
    by_document: dict[str, list[str]] = defaultdict(list)
    for task_id, document in documents.items():
        if task_id not in excused:
            by_document[document].append(task_id)
    verdicts = {}
    for document, task_ids in sorted(by_document.items()):
        if prod is None:
            compared = [t for t in task_ids if t in cand and cand[t]["status"] == "living"]
            verdicts[document] = DocumentVerdict(document, len(compared), 0,
                                                 sum(_in_top_k(cand.get(t), k) for t in compared))
            continue
        compared = sorted(t for t in task_ids if t in prod and prod[t]["status"] == "living")
        lost = [t for t in compared if _in_top_k(prod[t], k) and not _in_top_k(cand.get(t), k)]
        gained = [t for t in compared if _in_top_k(cand.get(t), k) and not _in_top_k(prod[t], k)]
        verdict = DocumentVerdict(document, len(compared), sum(_in_top_k(prod[t], k) for t in compared),
                                  sum(_in_top_k(cand.get(t), k) for t in compared), lost, gained)
        net = len(lost) - len(gained)
        if net >= MIN_DOCUMENT_LOSS and 2 * len(lost) >= len(compared):
            verdict.reason = (f"document {document}: {len(lost)} of its {len(compared)} tasks left the top {k} "
                              f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})")
        verdicts[document] = verdict
    return verdicts
