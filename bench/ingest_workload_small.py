"""bench.ingest's small workload (`--workload small`): 200 short Markdown notes."""

from __future__ import annotations

from pathlib import Path

from bench.ingest_workload_text import TOPICS, sentence


def build_small(dest: Path, documents: int = 200) -> list[Path]:
    """Short Markdown notes: two sections, one or two chunks each."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(5000 + d)
        topic = TOPICS[d % len(TOPICS)]
        parts = [f"# Note {d + 1}: {topic}\n"]
        for s in range(2):
            parts.append(f"## Part {s + 1}\n")
            parts.append(" ".join(sentence(rng, topic, rng.randint(12, 20)) for _ in range(rng.randint(4, 9))) + "\n")
        path = dest / f"note_{d + 1:03d}.md"
        path.write_text("\n".join(parts))
        paths.append(path)
    return paths
