"""The load and search benchmarks' synthetic store: a reproducible corpus of unit vectors and
topic-flavoured texts (`Corpus`), its documents as the store writes them, exact neighbours and recall,
latency helpers, and a pgserver Postgres with pgvector for them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

INDEX_VERSION = "iv-load-bench"
K = 10
PG_MAINTENANCE_WORK_MEM = "1GB"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# ---- 1. inbox sensor --------------------------------------------------------------------------


class Corpus:
    """Two-level Gaussian mixture of unit vectors with topic-flavoured texts; reproducible by seed."""

    def __init__(self, n_chunks: int, dim: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        self.n, self.dim, self.rng = n_chunks, dim, rng
        self.n_topics = max(4, n_chunks // 1000)
        self.n_sub = 20
        self.topics = self._unit(rng.standard_normal((self.n_topics, dim)))
        self.subs = rng.standard_normal((self.n_topics, self.n_sub, dim)).astype(np.float32) * (0.7 / np.sqrt(dim))
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        self.vocab = ["".join(rng.choice(letters, size=rng.integers(4, 9))) for _ in range(3000 + 30 * self.n_topics)]
        self.general = self.vocab[:3000]
        self.labels = rng.integers(0, self.n_topics, n_chunks)
        self.sublabels = rng.integers(0, self.n_sub, n_chunks)
        self.vectors = self._sample(self.labels, self.sublabels)

    @staticmethod
    def _unit(m: np.ndarray) -> np.ndarray:
        m = m.astype(np.float32)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    def _sample(self, labels: np.ndarray, sublabels: np.ndarray) -> np.ndarray:
        noise = self.rng.standard_normal((len(labels), self.dim)).astype(np.float32) * (0.5 / np.sqrt(self.dim))
        return self._unit(self.topics[labels] + self.subs[labels, sublabels] + noise)

    def topic_words(self, topic: int) -> list[str]:
        return self.vocab[3000 + 30 * topic: 3000 + 30 * (topic + 1)]

    def text(self, i: int) -> str:
        rng = np.random.default_rng(i)
        words = list(rng.choice(self.general, 14)) + list(rng.choice(self.topic_words(int(self.labels[i])), 6))
        rng.shuffle(words)
        return " ".join(words)

    def queries(self, n: int) -> tuple[np.ndarray, list[str]]:
        labels = self.rng.integers(0, self.n_topics, n)
        vectors = self._sample(labels, self.rng.integers(0, self.n_sub, n))
        texts = [" ".join(self.rng.choice(self.topic_words(int(t)), 3)) for t in labels]
        return vectors, texts


def documents(corpus: Corpus, per_doc: int, version: str = INDEX_VERSION, limit: int | None = None):
    """The corpus as (document record, chunks) pairs of `per_doc` chunks, the first `limit` chunks only."""
    from contextual_assets.models import DocumentRecord, EmbeddedChunk, content_hash

    total = corpus.n if limit is None else min(limit, corpus.n)
    for start in range(0, total, per_doc):
        doc_id = f"bench/doc-{start // per_doc:05d}.md"
        chunks = []
        for ordinal, i in enumerate(range(start, min(start + per_doc, total))):
            text = corpus.text(i)
            chunks.append(EmbeddedChunk(
                doc_id=doc_id, source_doc=doc_id, title=f"Doc {start // per_doc}", ordinal=ordinal,
                section_path=[f"Topic {corpus.labels[i]}"], text=text, token_count=20, content_hash=content_hash(text),
                header="", header_source="none", embedding=corpus.vectors[i].tolist(),
            ))
        record = DocumentRecord(doc_id=doc_id, index_version=version, source_path=f"/bench/{doc_id}", kind="md",
                                title=f"Doc {start // per_doc}", file_hash=f"{start:064x}", n_chunks=len(chunks),
                                updated_at="")
        yield record, chunks


def exact_top_k(corpus: Corpus, queries: np.ndarray, k: int) -> list[set[int]]:
    scores = queries @ corpus.vectors.T
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return [set(int(i) for i in row) for row in top]


def recall(found: list[list[int]], truth: list[set[int]], k: int) -> float:
    return float(np.mean([len(set(f[:k]) & t) / k for f, t in zip(found, truth)]))


def chunk_index(hit, per_doc: int) -> int:
    return int(hit.doc_id.rsplit("-", 1)[1].split(".")[0]) * per_doc + hit.ordinal


def start_postgres(workdir: Path):
    import pgserver

    # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
    data_dir = Path(tempfile.mkdtemp(prefix="ctx-load-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    server.psql("DROP DATABASE IF EXISTS ctx_load_bench;")
    server.psql("CREATE DATABASE ctx_load_bench;")
    # Room for the HNSW graph while CREATE INDEX builds it (pgvector warns and slows down otherwise).
    server.psql(f"ALTER DATABASE ctx_load_bench SET maintenance_work_mem = '{PG_MAINTENANCE_WORK_MEM}';")
    url = server.get_uri().replace("/postgres?", "/ctx_load_bench?", 1)
    return server, data_dir, url
