"""The product and the benchmarks use Dagster's public API only (`import dagster as dg`): a private
module (`dagster._...`) may change in any release, and pyproject bounds Dagster to the tested minor."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"\bdagster\._")  # `from dagster._core...`, `import dagster._serdes`, `dagster._x.y`


def private_dagster_uses(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PRIVATE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_no_private_dagster_imports():
    found = [hit for folder in ("contextual_assets", "eval_assets", "bench") for hit in private_dagster_uses(REPO / folder)]
    assert not found, "private Dagster modules used (use the public `dagster` API):\n" + "\n".join(found)


def test_the_check_finds_a_private_import(tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("import dagster as dg\nfrom dagster._core.events import DagsterEventType\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert private_dagster_uses(tmp_path) == ["mod.py:2: from dagster._core.events import DagsterEventType"]
