"""bench.ingest's codebase workload (`--workload codebase`): the Anthropic codebase set, a fixed set."""

from __future__ import annotations

import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CODEBASE = REPO_ROOT.parent / "shared" / "datasets" / "anthropic-codebase" / "codebase_chunks.json"


def build_codebase(dest: Path) -> list[Path]:
    """The 90 files of the Anthropic codebase set, one pre-chunked JSON per file (737 chunks)."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(json.loads(CODEBASE.read_text())):
        path = dest / f"{i:02d}_{Path(doc['doc_id']).name.replace('.', '_')}.json"
        path.write_text(json.dumps([doc]))
        paths.append(path)
    return paths
