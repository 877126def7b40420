"""bench.ingest's corpora (`--workload`): long PDFs with an outline (seed), the codebase set, short
notes (small), a skewed set, the stream's mixed notes, the shared fleet's long notes and kv-stress's
long sections (with the settings and KV pool that workload runs with, `WORKLOAD_OPTIONS`), all
generated reproducibly into a folder."""

from __future__ import annotations

import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CODEBASE = REPO_ROOT.parent / "shared" / "datasets" / "anthropic-codebase" / "codebase_chunks.json"


_TOPICS = ["ingestion", "retention", "billing", "routing", "replication", "auditing", "scheduling", "pricing",
           "escalation", "calibration", "provisioning", "forecasting", "sampling", "licensing", "onboarding"]
_WORDS = ("the a of to and in for on with by from at as under over between each every after before when "
          "which that this those these system operator contract clause vendor customer report ledger shipment "
          "invoice schedule threshold sensor pump valve reading incident review approval budget payment "
          "penalty delivery warranty inspection record quarter region policy service level target metric "
          "variance baseline exception filing notice period renewal term fee rate credit balance account "
          "station crew shift handover log maintenance interval pressure temperature flow alarm relay").split()


def _sentence(rng, topic: str, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    words.insert(rng.randrange(len(words)), topic)
    words.insert(rng.randrange(len(words)), f"{rng.choice(['ref', 'item', 'case'])}-{rng.randrange(10000):04d}")
    return " ".join(words).capitalize() + "."


def build_seed(dest: Path, documents: int = 5, sections: int = 14, paragraphs: int = 10) -> list[Path]:
    """Long PDFs with an outline and headings: `sections` sections of `paragraphs` paragraphs each
    (~140 chunks per document at 200 tokens a chunk)."""
    import random

    import pymupdf

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(1000 + d)
        doc = pymupdf.open()
        toc = []
        page = doc.new_page()
        y = 72.0

        def write(text: str, size: float, font: str) -> None:
            nonlocal page, y
            box_height = 14 + size * 1.3 * (len(text) // int(900 / size) + 1)
            if y + box_height > 780:
                page = doc.new_page()
                y = 72.0
            rect = pymupdf.Rect(72, y, 523, y + box_height)
            page.insert_textbox(rect, text, fontsize=size, fontname=font)
            y += box_height

        for s in range(sections):
            topic = _TOPICS[(d + s) % len(_TOPICS)]
            title = f"{s + 1}. {topic.capitalize()} {rng.choice(['procedure', 'terms', 'controls', 'requirements'])}"
            if y > 600:
                page = doc.new_page()
                y = 72.0
            toc.append([1, title, doc.page_count])
            write(title, 15, "hebo")
            for _ in range(paragraphs):
                write(" ".join(_sentence(rng, topic, rng.randint(14, 22)) for _ in range(7)), 10, "helv")
        doc.set_toc(toc)
        path = dest / f"operations_manual_{d + 1:02d}.pdf"
        doc.save(path, garbage=3, deflate=True)
        doc.close()
        paths.append(path)
    return paths


def build_codebase(dest: Path) -> list[Path]:
    """The 90 files of the Anthropic codebase set, one pre-chunked JSON per file (737 chunks)."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(json.loads(CODEBASE.read_text())):
        path = dest / f"{i:02d}_{Path(doc['doc_id']).name.replace('.', '_')}.json"
        path.write_text(json.dumps([doc]))
        paths.append(path)
    return paths


def build_small(dest: Path, documents: int = 200) -> list[Path]:
    """Short Markdown notes: two sections, one or two chunks each."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(5000 + d)
        topic = _TOPICS[d % len(_TOPICS)]
        parts = [f"# Note {d + 1}: {topic}\n"]
        for s in range(2):
            parts.append(f"## Part {s + 1}\n")
            parts.append(" ".join(_sentence(rng, topic, rng.randint(12, 20)) for _ in range(rng.randint(4, 9))) + "\n")
        path = dest / f"note_{d + 1:03d}.md"
        path.write_text("\n".join(parts))
        paths.append(path)
    return paths


def _markdown(rng, title: str, topic: str, sections: int, paragraphs: int) -> str:
    """A titled Markdown document of `sections` headed sections of `paragraphs` paragraphs each
    (a paragraph is about one 200-token chunk)."""
    parts = [f"# {title}\n"]
    for s in range(sections):
        parts.append(f"## {s + 1}. {topic.capitalize()} {rng.choice(['procedure', 'terms', 'controls', 'records'])}\n")
        for _ in range(paragraphs):
            parts.append(" ".join(_sentence(rng, topic, rng.randint(14, 22)) for _ in range(rng.randint(4, 7))) + "\n")
    return "\n".join(parts)


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
        topic = _TOPICS[d % len(_TOPICS)]
        name = "zz_master_handbook.md" if last else f"doc_{d + 1:03d}.md"
        title = "Master handbook" if last else f"Procedure {d + 1}: {topic}"
        path = dest / name
        path.write_text(_markdown(rng, title, topic, sections * (factor if last else 1), paragraphs))
        paths.append(path)
    return paths


def build_mixed(dest: Path, documents: int, seed: int, prefix: str = "doc") -> list[Path]:
    """Small-to-medium Markdown documents, 1 to 10 chunks (about 2.5 on average)."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(seed + d)
        topic = _TOPICS[d % len(_TOPICS)]
        sections, paragraphs = rng.choice((1, 1, 1, 2, 2, 3, 5)), rng.choice((1, 1, 2))
        path = dest / f"{prefix}_{d + 1:04d}.md"
        path.write_text(_markdown(rng, f"{prefix.capitalize()} {d + 1}: {topic}", topic, sections, paragraphs))
        paths.append(path)
    return paths


def build_stream(dest: Path, documents: int = 2000) -> list[Path]:
    """The inbox stream's documents (dropped in waves by `run_stream`)."""
    return build_mixed(dest, documents, seed=9000)


def build_long_notes(dest: Path, documents: int, seed: int, prefix: str = "doc", paragraphs: int = 60) -> list[Path]:
    """Markdown documents of one long section of `paragraphs` paragraphs (~0.8 chunk each): with the
    default 1,000-token context each header request carries ~900 tokens that few others share, the
    most fleet work per chunk a default header request makes (the least client CPU per fleet-second)."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(seed + d)
        topic = _TOPICS[d % len(_TOPICS)]
        path = dest / f"{prefix}_{d + 1:04d}.md"
        path.write_text(_markdown(rng, f"{prefix.capitalize()} {d + 1}: {topic}", topic, 1, paragraphs))
        paths.append(path)
    return paths


# Documents per `ctx ingest` process of shared-fleet: 56 of ~48 chunks (2,681 for part a), 33.0 s of
# model-floor work each on the shared fleet at time scale 1 (>= 30 s, so that the shares can settle;
# tests/bench checks the bound).
SHARED_FLEET_DOCUMENTS_PER_PROCESS = 56


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


# kv-stress: long header prompts on replicas whose KV pool holds a few of them. The header context
# budget is 4,000 tokens (CTX_CONTEXT_TOKENS; the default is 1,000), so a request carries its
# section's ~3,300 words; the replicas serve Llama-3.2-3B bf16 on a 12 GB card (RTX 3060 12GB / 4070
# class, ~11.7 GiB to torch) at gpu_memory_utilization 0.9: 10.5 GiB - 6.0 GiB of weights - ~2.2 GiB
# of activations and CUDA graphs (engine.CALIBRATION's A100 figures) = ~2.3 GiB of KV / 112 KiB a
# token = 21,760 tokens (1,360 blocks of 16). Step costs stay the A100's (such a card is several times
# slower, which changes the walls, not where admission stops): the workload is about the KV bound.
KV_STRESS_CONTEXT_TOKENS = 4000
KV_STRESS_KV_CACHE_TOKENS = 21_760
# bench.ingest's BenchOptions fields a workload sets (its replicas' KV pool and its header context).
WORKLOAD_OPTIONS: dict[str, dict[str, int]] = {
    "kv-stress": {"context_tokens": KV_STRESS_CONTEXT_TOKENS, "kv_cache_tokens": KV_STRESS_KV_CACHE_TOKENS}}


def build_kv_stress(dest: Path, documents: int = 6, sections: int = 2, paragraphs: int = 30) -> list[Path]:
    """Markdown documents of `sections` sections of `paragraphs` paragraphs (~24 chunks a section):
    each section longer than the 4,000-token context, so a header request carries ~3,300 words of it
    (`KV_STRESS_CONTEXT_TOKENS`); chunks near a section's ends share the window's start, and so the KV
    blocks of that prefix. 256 such sequences need ~850K tokens of KV, 39x the kv-stress replica's pool: admission
    stops at the KV bound, and decoding sequences that find no free block preempt others."""
    import random

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(13000 + d)
        topic = _TOPICS[d % len(_TOPICS)]
        path = dest / f"register_{d + 1:02d}.md"
        path.write_text(_markdown(rng, f"Register {d + 1}: {topic}", topic, sections, paragraphs))
        paths.append(path)
    return paths
