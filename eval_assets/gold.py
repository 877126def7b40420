"""Gold sets keyed to raw chunk content (never to generated headers).

Two formats are read: the Anthropic contextual-retrieval evaluation set (`golden_chunks` with
content, `golden_chunk_uuids`) and a native JSONL: {"id", "query", "evidence": [{"text", "doc_id"?}]}.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from contextual_assets.errors import ConfigurationError


def normalise(text: str) -> str:
    return " ".join(text.split()).lower()


class Evidence(BaseModel):
    text: str = Field(description="Exact raw text span, or a whole gold chunk's content.")
    doc_id: str | None = None
    whole_chunk: bool = False


class GoldTask(BaseModel):
    id: str
    query: str
    evidence: list[Evidence]
    task_kind: str = "section"
    stratum: str = ""

    def satisfied_by(self, chunk_text: str) -> list[int]:
        """Indices of the evidence items this chunk satisfies."""
        chunk = normalise(chunk_text)
        found = []
        for index, item in enumerate(self.evidence):
            span = normalise(item.text)
            # Containment, not equality: gold survives re-chunking into larger chunks.
            if span and span in chunk:
                found.append(index)
        return found


class GoldSet(BaseModel):
    name: str
    sha256: str
    tasks: list[GoldTask]


def load_gold(path: str | Path) -> GoldSet:
    path = Path(path)
    if not path.exists():
        raise ConfigurationError(f"gold file {path} not found")
    raw = path.read_bytes()
    tasks: list[GoldTask] = []
    for line_no, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if "golden_chunks" in item:
                tasks.append(GoldTask(
                    id=f"{path.stem}:{line_no}", query=item["query"], task_kind="code",
                    evidence=[Evidence(text=g["content"], doc_id=g.get("doc_uuid"), whole_chunk=True)
                              for g in item["golden_chunks"]],
                ))
            else:
                item.setdefault("id", f"{path.stem}:{line_no}")
                tasks.append(GoldTask.model_validate(item))
        except (json.JSONDecodeError, KeyError, ValidationError) as exc:
            raise ConfigurationError(f"{path}:{line_no}: not a valid gold task ({exc})") from None
    if not tasks:
        raise ConfigurationError(f"gold file {path} holds no tasks")
    return GoldSet(name=path.name, sha256=hashlib.sha256(raw).hexdigest(), tasks=tasks)
