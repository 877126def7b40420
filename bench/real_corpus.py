"""A search corpus of real text with real all-MiniLM-L6-v2 vectors, grown to any size by perturbation.

Base chunks (all real text, each embedded by the bundled MiniLM exactly as ingest embeds a chunk):
- the 737 chunks of the Anthropic codebase dataset, and every 8-line window of the chunks longer
  than 12 lines (smaller chunks of the same code, as a finer chunking would cut them);
- the PDF samples, parsed and chunked by the project's own parser (120-token chunks; the
  password-protected one is skipped).

Growing to `n` chunks: replica r (r = 0, 1, ...) holds every base chunk once, grouped into documents
by base file (`r003/<file>`). Replica 0 is the base itself. In every other replica a chunk is a
perturbed copy of its base chunk b:
- its vector is normalize(v_b + β1·v_m1 + β2·v_m2 + ε): β ~ U(0, 0.6) towards two of b's ten nearest
  base neighbours m1, m2 (so copies spread along the space MiniLM actually uses, not around it) plus
  isotropic noise ε of norm 0.15;
- its text is b's with one word in eight dropped and a line of m1 appended, so BM25 postings differ too.
A perturbed vector is not MiniLM's embedding of the perturbed text; the base vectors are.

Queries: the 124 questions of the codebase evaluation set, then spans of 4-12 consecutive words of
base chunks (each distinct), as many as asked for. Base embeddings are cached under
`~/.cache/ctx-bench` (keyed by model and texts): embedding them takes minutes on two cores.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets"
CACHE = Path.home() / ".cache" / "ctx-bench"
WINDOW_LINES, WINDOW_MIN_LINES = 8, 12
PDF_CHUNK_TOKENS = 120
NEIGHBOURS, MAX_PULL, NOISE_NORM, DROP_EVERY = 10, 0.6, 0.15, 8


@dataclass(frozen=True)
class BaseChunk:
    file: str  # the base document (a code file's doc id, or a PDF's name)
    title: str
    section_path: tuple[str, ...]
    text: str


def base_chunks(datasets: Path = DATASETS) -> list[BaseChunk]:
    """The codebase chunks, their 8-line windows and the PDF samples' chunks, in a fixed order."""
    from contextual_assets.parsing.chunking import chunk_blocks
    from contextual_assets.parsing.dispatch import parse_file
    from contextual_assets.parsing.tokens import token_counter

    out: list[BaseChunk] = []
    for doc in json.loads((datasets / "anthropic-codebase" / "codebase_chunks.json").read_text()):
        for chunk in doc["chunks"]:
            text = chunk["content"]
            out.append(BaseChunk(doc["doc_id"], doc["doc_id"], (f"chunk {chunk['original_index']}",), text))
            lines = text.splitlines()
            if len(lines) > WINDOW_MIN_LINES:
                for start in range(0, len(lines), WINDOW_LINES):
                    window = "\n".join(lines[start:start + WINDOW_LINES]).strip()
                    if len(window.split()) >= 4:
                        out.append(BaseChunk(doc["doc_id"], doc["doc_id"],
                                             (f"chunk {chunk['original_index']}", f"lines {start + 1}-"), window))
    counter = token_counter()
    for path in sorted((datasets / "pdf-samples").glob("*.pdf")):
        try:
            parsed, _ = parse_file(path)
        except Exception:  # the password-protected sample: nothing to read without its password
            continue
        for chunk in chunk_blocks(path.name, parsed, counter, PDF_CHUNK_TOKENS):
            out.append(BaseChunk(path.name, chunk.title, tuple(chunk.section_path), chunk.text))
    return out


def embed_cached(texts: list[str], cache: Path = CACHE) -> np.ndarray:
    """MiniLM vectors of `texts` (L2-normalised float32), through the project's own embedder; cached."""
    from contextual_assets.embedder_config import EmbedderCatalog

    catalog = EmbedderCatalog()
    key = hashlib.sha256(json.dumps([catalog.identity(), texts]).encode()).hexdigest()[:16]
    path = cache / f"minilm-{key}.npy"
    if path.exists():
        return np.load(path)
    vectors = np.asarray(catalog.get().embed(texts), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


class RealCorpus:
    """`n` chunks: the base chunks, then perturbed replicas of them (see the module docstring)."""

    def __init__(self, n: int, seed: int = 7, datasets: Path = DATASETS):
        self.base = base_chunks(datasets)
        self.base_vectors = embed_cached([c.text for c in self.base])
        self.n, self.dim = n, self.base_vectors.shape[1]
        self.datasets, self.rng = datasets, np.random.default_rng(seed)
        b = len(self.base)
        similarity = self.base_vectors @ self.base_vectors.T
        np.fill_diagonal(similarity, -np.inf)
        self.neighbours = np.argpartition(-similarity, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]
        # The plan of every chunk: its base chunk and (for copies) two neighbours and their pulls.
        index = np.arange(n)
        self.source = index % b
        self.replica = index // b
        picks = self.rng.integers(0, NEIGHBOURS, (n, 2))
        self.pulled = self.neighbours[self.source[:, None], picks]
        self.pulls = self.rng.uniform(0, MAX_PULL, (n, 2)).astype(np.float32)
        self.vectors = self._vectors()
        self.keys = self._keys()  # chunk index -> (doc_id, ordinal)

    def _keys(self) -> list[tuple[str, int]]:
        """Each chunk's document (its replica and base file: `r003/<file>`) and ordinal in it."""
        keys: list[tuple[str, int]] = []
        for i in range(self.n):
            doc_id = f"r{self.replica[i]:03d}/{self.base[self.source[i]].file}"
            keys.append((doc_id, keys[-1][1] + 1 if keys and keys[-1][0] == doc_id else 0))
        return keys

    def _vectors(self) -> np.ndarray:
        out = np.empty((self.n, self.dim), dtype=np.float32)
        for start in range(0, self.n, 20_000):
            sl = slice(start, min(start + 20_000, self.n))
            v = self.base_vectors[self.source[sl]].copy()
            copies = self.replica[sl] > 0
            noise = self.rng.standard_normal((int(copies.sum()), self.dim)).astype(np.float32)
            noise *= NOISE_NORM / np.linalg.norm(noise, axis=1, keepdims=True)
            pulled = (self.pulls[sl, :1] * self.base_vectors[self.pulled[sl, 0]]
                      + self.pulls[sl, 1:] * self.base_vectors[self.pulled[sl, 1]])
            v[copies] += pulled[copies] + noise
            out[sl] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out

    def text(self, i: int) -> str:
        base = self.base[self.source[i]].text
        if self.replica[i] == 0:
            return base
        words = base.split(" ")
        kept = " ".join(w for j, w in enumerate(words) if (j + i) % DROP_EVERY)
        other = [line for line in self.base[self.pulled[i, 0]].text.splitlines() if line.strip()]
        return kept + "\n" + (other[i % len(other)] if other else "")

    def documents(self, version: str, limit: int | None = None) -> Iterator[tuple]:
        """(DocumentRecord, [EmbeddedChunk]) per replica and base file, the first `limit` chunks only."""
        from contextual_assets.models import DocumentRecord, EmbeddedChunk, content_hash

        total = self.n if limit is None else min(limit, self.n)
        start = 0
        while start < total:
            doc_id = self.keys[start][0]
            end = start + 1
            while end < total and self.keys[end][0] == doc_id:
                end += 1
            chunks = []
            for i in range(start, end):
                base, text = self.base[self.source[i]], self.text(i)
                chunks.append(EmbeddedChunk(
                    doc_id=doc_id, source_doc=doc_id, title=base.title, ordinal=self.keys[i][1],
                    section_path=list(base.section_path), text=text, token_count=len(text.split()),
                    content_hash=content_hash(text), header="", header_source="none",
                    embedding=self.vectors[i].tolist()))
            yield (DocumentRecord(doc_id=doc_id, index_version=version, source_path=f"/bench/{doc_id}",
                                  kind="pdf" if doc_id.endswith(".pdf") else "code", title=base.title,
                                  file_hash=hashlib.sha256(doc_id.encode()).hexdigest(),
                                  n_chunks=len(chunks), updated_at=""), chunks)
            start = end

    def queries(self, n: int) -> list[str]:
        """The evaluation set's questions, then distinct 4-12-word spans of base chunks."""
        path = self.datasets / "anthropic-codebase" / "evaluation_set.dev.jsonl"
        out = [json.loads(line)["query"] for line in path.read_text().splitlines() if line.strip()][:n]
        seen = set(out)
        rng = np.random.default_rng(11)
        while len(out) < n:
            words = re.findall(r"\S+", self.base[int(rng.integers(0, len(self.base)))].text)
            if len(words) < 4:
                continue
            length = int(rng.integers(4, 13))
            start = int(rng.integers(0, max(1, len(words) - length)))
            span = " ".join(words[start:start + length])
            if span not in seen:
                seen.add(span)
                out.append(span)
        return out
