"""bench.ingest's shared-fleet workload (`--workload shared-fleet`): one part of long Markdown notes
per `ctx ingest` process (`--processes`), each in its own folder (bench/ingest_mode_shared_fleet.py)."""

from __future__ import annotations

from pathlib import Path

from bench import ingest_options
from bench.ingest_workload_text import TOPICS, markdown

# Documents per `ctx ingest` process of shared-fleet: 56 of ~48 chunks (2,681 for part a), 33.0 s of
# model-floor work each on the shared fleet at time scale 1 (>= 30 s, so that the shares can settle;
# tests/bench checks the bound).
SHARED_FLEET_DOCUMENTS_PER_PROCESS = 56


def build_long_notes(dest: Path, documents: int, seed: int, prefix: str = "doc", paragraphs: int = 60) -> list[Path]:
    """Markdown documents of one long section of `paragraphs` paragraphs (~0.8 chunk each): with the
    default 1,000-token context each header request carries ~900 tokens that few others share, the
    most fleet work per chunk a default header request makes (the least client CPU per fleet-second)."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(seed + d)
        topic = TOPICS[d % len(TOPICS)]
        path = dest / f"{prefix}_{d + 1:04d}.md"
        path.write_text(markdown(rng, f"{prefix.capitalize()} {d + 1}: {topic}", topic, 1, paragraphs))
        paths.append(path)
    return paths


def build_shared_parts(dest: Path, processes: int, documents: int | None = None, paragraphs: int = 60) -> list[Path]:
    """`processes` parts of long notes in folders a/, b/, ... (`documents` in all; default
    SHARED_FLEET_DOCUMENTS_PER_PROCESS each)."""
    import itertools

    documents = documents if documents is not None else processes * SHARED_FLEET_DOCUMENTS_PER_PROCESS
    bounds = [round(i * documents / processes) for i in range(processes + 1)]
    paths = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        name = chr(ord("a") + i)
        paths += build_long_notes(dest / name, hi - lo, seed=11000 + 1000 * i, prefix=name, paragraphs=paragraphs)
    return paths


# Reads OPTIONS.processes (bench/ingest_options.py) at call time.
def build_shared_fleet(dest: Path, documents: int | None = None, paragraphs: int = 60) -> list[Path]:
    """`--processes` parts in folders a/, b/, ..., one per `ctx ingest` process of `run_shared_fleet`
    (`documents` in all; default SHARED_FLEET_DOCUMENTS_PER_PROCESS each)."""
    return build_shared_parts(dest, ingest_options.OPTIONS.processes, documents, paragraphs)
