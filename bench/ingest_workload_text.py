"""The generated prose every bench.ingest workload but codebase is written in: topics, a fixed vocabulary,
seeded sentences and headed Markdown documents (bench/ingest_workloads.py lists the workloads)."""

from __future__ import annotations

TOPICS = ["ingestion", "retention", "billing", "routing", "replication", "auditing", "scheduling", "pricing",
          "escalation", "calibration", "provisioning", "forecasting", "sampling", "licensing", "onboarding"]
WORDS = ("the a of to and in for on with by from at as under over between each every after before when "
         "which that this those these system operator contract clause vendor customer report ledger shipment "
         "invoice schedule threshold sensor pump valve reading incident review approval budget payment "
         "penalty delivery warranty inspection record quarter region policy service level target metric "
         "variance baseline exception filing notice period renewal term fee rate credit balance account "
         "station crew shift handover log maintenance interval pressure temperature flow alarm relay").split()


def sentence(rng, topic: str, n: int) -> str:
    """`n` words of the vocabulary drawn by `rng`, with the topic and a reference inserted."""
    words = [rng.choice(WORDS) for _ in range(n)]
    words.insert(rng.randrange(len(words)), topic)
    words.insert(rng.randrange(len(words)), f"{rng.choice(['ref', 'item', 'case'])}-{rng.randrange(10000):04d}")
    return " ".join(words).capitalize() + "."


def markdown(rng, title: str, topic: str, sections: int, paragraphs: int) -> str:
    """A titled Markdown document of `sections` headed sections of `paragraphs` paragraphs each
    (a paragraph is about one 200-token chunk)."""
    parts = [f"# {title}\n"]
    for s in range(sections):
        parts.append(f"## {s + 1}. {topic.capitalize()} {rng.choice(['procedure', 'terms', 'controls', 'records'])}\n")
        for _ in range(paragraphs):
            parts.append(" ".join(sentence(rng, topic, rng.randint(14, 22)) for _ in range(rng.randint(4, 7))) + "\n")
    return "\n".join(parts)
