"""Shared output of the benchmark scripts."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path | None, result: dict) -> None:
    """Write a benchmark's result as indented JSON, creating the folder; nothing when no path."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
