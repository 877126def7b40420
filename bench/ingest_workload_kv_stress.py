"""bench.ingest's kv-stress workload (`--workload kv-stress`): long header prompts on replicas whose KV
pool holds a few of them, with the settings that workload runs with."""

from __future__ import annotations

from pathlib import Path

from bench.ingest_workload_text import TOPICS, markdown

# kv-stress: long header prompts on replicas whose KV pool holds a few of them. The header context
# budget is 4,000 tokens (CTX_CONTEXT_TOKENS; the default is 1,000), so a request carries its
# section's ~3,300 words; the replicas serve Llama-3.2-3B bf16 on a 12 GB card (RTX 3060 12GB / 4070
# class, ~11.7 GiB to torch) at gpu_memory_utilization 0.9: 10.5 GiB - 6.0 GiB of weights - ~2.2 GiB
# of activations and CUDA graphs (engine.CALIBRATION's A100 figures) = ~2.3 GiB of KV / 112 KiB a
# token = 21,760 tokens (1,360 blocks of 16). Step costs stay the A100's (such a card is several times
# slower, which changes the walls, not where admission stops): the workload is about the KV bound.
KV_STRESS_CONTEXT_TOKENS = 4000
KV_STRESS_KV_CACHE_TOKENS = 21_760


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
        topic = TOPICS[d % len(TOPICS)]
        path = dest / f"register_{d + 1:02d}.md"
        path.write_text(markdown(rng, f"Register {d + 1}: {topic}", topic, sections, paragraphs))
        paths.append(path)
    return paths
