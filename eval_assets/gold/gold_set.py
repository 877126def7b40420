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


TASK_KINDS = ("section", "needle", "citation", "code")


class Evidence(BaseModel):
    text: str = Field(min_length=1, description="Exact raw text span, or a whole gold chunk's content.")
    doc_id: str | None = Field(default=None, description="Document (partition key or source document id).")
    whole_chunk: bool = False


class GoldTask(BaseModel):
    """One query and the raw-text evidence that answers it. Never tied to generated headers."""

    id: str
    query: str = Field(min_length=1)
    evidence: list[Evidence] = Field(min_length=1)
    task_kind: str = "section"  # section-level question | within-section needle | citation/substance | code
    stratum: str = ""
    notes: str = ""

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
    if path.suffix.lower() in {".yaml", ".yml"}:
        import yaml

        try:
            items = yaml.safe_load(raw) or []
            tasks = [GoldTask.model_validate({"id": f"{path.stem}:{i}", **item}) for i, item in enumerate(items, 1)]
        except (yaml.YAMLError, ValidationError, TypeError) as exc:
            raise ConfigurationError(f"{path}: not a valid gold set ({exc})") from None
        return GoldSet(name=path.name, sha256=hashlib.sha256(raw).hexdigest(), tasks=_unique(tasks, path))
    for line_no, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if "golden_chunks" in item:
                docs = [pair[0] for pair in item.get("golden_chunk_uuids", [])]
                tasks.append(GoldTask(
                    id=f"{path.stem}:{line_no}", query=item["query"], task_kind="code",
                    evidence=[Evidence(text=g["content"], doc_id=g.get("doc_uuid") or (docs[i] if i < len(docs) else None),
                                       whole_chunk=True)
                              for i, g in enumerate(item["golden_chunks"])],
                ))
            else:
                item.setdefault("id", f"{path.stem}:{line_no}")
                tasks.append(GoldTask.model_validate(item))
        except (json.JSONDecodeError, KeyError, ValidationError) as exc:
            raise ConfigurationError(f"{path}:{line_no}: not a valid gold task ({exc})") from None
    return GoldSet(name=path.name, sha256=hashlib.sha256(raw).hexdigest(), tasks=_unique(tasks, path))


def _unique(tasks: list[GoldTask], path: Path) -> list[GoldTask]:
    if not tasks:
        raise ConfigurationError(f"gold file {path} holds no tasks")
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ConfigurationError(f"{path}: task id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks


def write_gold(path: str | Path, tasks: list[GoldTask]) -> Path:
    """Write tasks as JSONL (the native format)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for task in tasks:
            handle.write(task.model_dump_json(exclude_defaults=True) + "\n")
    return path
