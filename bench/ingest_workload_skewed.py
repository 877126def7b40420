"""bench.ingest's skewed workload (`--workload skewed`): similar Markdown documents and one 15x their
size, named to sort last."""

from __future__ import annotations

from pathlib import Path

from bench.ingest_workload_text import TOPICS, markdown


def build_skewed(dest: Path, documents: int = 40, sections: int = 3, paragraphs: int = 2,
                 factor: int = 15) -> list[Path]:
    """`documents` - 1 similar Markdown documents (~sections x paragraphs chunks each) and one with
    `factor` times as many sections, named to sort last: admission in key order starts it last."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        last = d == documents - 1
        rng = random.Random(7000 + d)
        topic = TOPICS[d % len(TOPICS)]
        name = "zz_master_handbook.md" if last else f"doc_{d + 1:03d}.md"
        title = "Master handbook" if last else f"Procedure {d + 1}: {topic}"
        path = dest / name
        path.write_text(markdown(rng, title, topic, sections * (factor if last else 1), paragraphs))
        paths.append(path)
    return paths
