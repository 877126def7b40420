"""The quick model swap's corpus: the codebase documents its dev questions ask about most, with the questions
that those documents alone answer. Small enough for two CPU models in minutes, and unlike the sample corpus
(every variant at Pass@10 100) its variants differ."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

QUICK_DOCUMENTS = 16  # 104 chunks and 37 questions of the dev half


def codebase_subset(dataset: Path, dest: Path, documents: int = QUICK_DOCUMENTS) -> tuple[list[Path], Path, dict]:
    """(one pre-chunked JSON per document, gold JSONL, what was kept): the `documents` most-asked codebase
    documents (ties by id, so the same every run) and every dev question whose golden documents are all among
    them. One file per document, as a codebase is ingested: the fallback share then fails the documents whose
    headers a model could not write, not the whole build."""
    corpus = json.loads((dataset / "codebase_chunks.json").read_text())
    questions = [json.loads(line) for line in (dataset / "evaluation_set.dev.jsonl").read_text().splitlines()
                 if line.strip()]
    asked = Counter(uuid for q in questions for uuid in set(q["golden_doc_uuids"]))
    chosen = sorted(corpus, key=lambda d: (-asked[d["original_uuid"]], d["original_uuid"]))[:documents]
    kept = {d["original_uuid"] for d in chosen}
    answered = [q for q in questions if set(q["golden_doc_uuids"]) <= kept]
    (dest / "documents").mkdir(parents=True, exist_ok=True)
    paths = [dest / "documents" / f"{d['doc_id']}.json" for d in chosen]
    for path, document in zip(paths, chosen):
        path.write_text(json.dumps([document]))
    gold_path = dest / "codebase_quick.dev.jsonl"
    gold_path.write_text("".join(json.dumps(q) + "\n" for q in answered))
    return paths, gold_path, {"documents": len(chosen), "chunks": sum(len(d["chunks"]) for d in chosen),
                              "questions": len(answered)}
