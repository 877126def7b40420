"""bench.ingest's stream workload (`--workload stream`): 2,000 small-to-medium Markdown documents,
dropped into the inbox in waves by the stream mode (bench/ingest_mode_stream.py)."""

from __future__ import annotations

from pathlib import Path

from bench.ingest_workload_text import TOPICS, markdown


def build_mixed(dest: Path, documents: int, seed: int, prefix: str = "doc") -> list[Path]:
    """Small-to-medium Markdown documents, 1 to 10 chunks (about 2.5 on average)."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(seed + d)
        topic = TOPICS[d % len(TOPICS)]
        sections, paragraphs = rng.choice((1, 1, 1, 2, 2, 3, 5)), rng.choice((1, 1, 2))
        path = dest / f"{prefix}_{d + 1:04d}.md"
        path.write_text(markdown(rng, f"{prefix.capitalize()} {d + 1}: {topic}", topic, sections, paragraphs))
        paths.append(path)
    return paths


def build_stream(dest: Path, documents: int = 2000) -> list[Path]:
    """The inbox stream's documents (dropped in waves by `run_stream`)."""
    return build_mixed(dest, documents, seed=9000)
