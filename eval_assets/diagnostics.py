"""Header diagnostics: how healthy the generated situating headers of an index version are.

Templated or near-duplicate headers, empty headers, header/chunk similarity and header dominance
(a header that pulls a chunk's embedding towards itself). Pure functions: callers pass headers,
chunk texts and optionally an `embed` function, and get plain numbers back.
"""

from __future__ import annotations

import random
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from contextual_assets.embedding import Embedder

__all__ = ["HEADER_SAMPLE", "NEAR_DUPLICATE_CAP", "header_diagnostics", "header_sample", "remembered"]

HEADER_SAMPLE = 200  # chunks whose headers the header checks judge: their signals are shares

# Pairwise near-duplicate comparison is quadratic; beyond this many non-empty headers it runs on a
# deterministic sample of this size (exact duplicates are still found among all headers).
NEAR_DUPLICATE_CAP = 2000
_TEMPLATE_MIN_SHARED = 3
_NEAR_DUPLICATE_JACCARD = 0.8
_SHINGLE = 3
_WORD = re.compile(r"\w+")
_DIGIT = re.compile(r"\d+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _header_template(header: str, text: str) -> str:
    """Lowercase, each run of digits -> '0', drop words that also occur in the chunk, normalise whitespace."""
    chunk_words = {_DIGIT.sub("0", w) for w in _words(text)}
    kept = []
    for token in _DIGIT.sub("0", header.lower()).split():
        core = "".join(_WORD.findall(token))
        if core and core in chunk_words:
            continue
        kept.append(token)
    return " ".join(kept)


def _shingles(header: str) -> frozenset[tuple[str, ...]]:
    """Word 3-grams of a header; a header shorter than three words is one shingle."""
    words = header.lower().split()
    if len(words) < _SHINGLE:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1))


def _near_duplicates(headers: Sequence[str], indices: list[int]) -> set[int]:
    """Indices (of `headers`) with a word-shingle Jaccard >= 0.8 to another header.

    Exact duplicates (identical shingle sets) are found among all `indices` by hashing. The
    pairwise comparison is O(m^2) and runs on at most NEAR_DUPLICATE_CAP indices: beyond that, on a
    sample drawn with a fixed seed, so the result is deterministic but may miss some pairs.
    """
    shingles = {i: _shingles(headers[i]) for i in indices}
    flagged: set[int] = set()
    groups: dict[frozenset, list[int]] = {}
    for i in indices:
        if shingles[i]:
            groups.setdefault(shingles[i], []).append(i)
    for members in groups.values():
        if len(members) > 1:
            flagged.update(members)

    pool = [i for i in indices if shingles[i]]
    if len(pool) > NEAR_DUPLICATE_CAP:
        pool = sorted(random.Random(0).sample(pool, NEAR_DUPLICATE_CAP))
    # Sort by size: |A ∩ B| / |A ∪ B| <= |A| / |B| for |A| <= |B|, so stop once the size ratio fails.
    pool.sort(key=lambda i: (len(shingles[i]), i))
    for a_pos, a in enumerate(pool):
        set_a = shingles[a]
        for b in pool[a_pos + 1 :]:
            set_b = shingles[b]
            if len(set_a) < _NEAR_DUPLICATE_JACCARD * len(set_b):
                break
            if a in flagged and b in flagged:
                continue
            inter = len(set_a & set_b)
            if inter and inter / (len(set_a) + len(set_b) - inter) >= _NEAR_DUPLICATE_JACCARD:
                flagged.update((a, b))
    return flagged


def _cosines(left: list[list[float]], right: list[list[float]]) -> np.ndarray:
    a = np.asarray(left, dtype=np.float64)
    b = np.asarray(right, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def _token_jaccard(left: str, right: str) -> float:
    a, b = set(_words(left)), set(_words(right))
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def header_diagnostics(
    headers: list[str],
    texts: list[str],
    embed: Callable[[list[str]], list[list[float]]] | None = None,
) -> dict:
    """Health of generated situating headers, given each header and its chunk's raw text.

    Returns a dict with
      n                        number of headers;
      mean_header_words        mean whitespace word count (empty headers count 0);
      empty_rate               share of empty (blank) headers;
      templated_rate           share of all headers that are templated: their template (lowercased,
                               each run of digits -> '0', words that also appear in their own chunk removed,
                               whitespace normalised) is non-empty and shared by >= 3 headers, or
                               they are near-duplicates (word 3-gram Jaccard >= 0.8) of another
                               header. Templates are counted with a hash map (linear); the pairwise
                               near-duplicate check runs on at most NEAR_DUPLICATE_CAP (2,000)
                               non-empty headers, a fixed-seed sample beyond that (exact duplicates
                               are still caught among all);
      header_chunk_similarity  mean cosine of embed(header) and embed(text) when `embed` is given,
                               else mean token Jaccard; None when every header is empty;
      header_dominance         with `embed` only: share of chunks whose embed(header + "\\n\\n" + text)
                               is closer (cosine) to embed(header) than to embed(text); else None.
    Empty headers are left out of the similarity and dominance means. `embed` is called at most
    three times, each with one batch of strings.
    """
    if len(headers) != len(texts):
        raise ValueError(f"{len(headers)} headers but {len(texts)} texts")
    n = len(headers)
    result: dict = {
        "n": n,
        "mean_header_words": 0.0,
        "empty_rate": 0.0,
        "templated_rate": 0.0,
        "header_chunk_similarity": None,
        "header_dominance": None,
    }
    if n == 0:
        return result
    present = [i for i, h in enumerate(headers) if h.strip()]
    result["mean_header_words"] = sum(len(h.split()) for h in headers) / n
    result["empty_rate"] = (n - len(present)) / n
    result["templated_rate"] = len(_templated(headers, texts, present)) / n
    if not present:
        return result
    kept_headers = [headers[i] for i in present]
    kept_texts = [texts[i] for i in present]
    if embed is None:
        result["header_chunk_similarity"] = _mean_token_jaccard(kept_headers, kept_texts)
    else:
        similarity, dominance = _embedding_similarity(kept_headers, kept_texts, embed)
        result["header_chunk_similarity"] = similarity
        result["header_dominance"] = dominance
    return result


def _templated(headers: list[str], texts: list[str], present: list[int]) -> set[int]:
    """Indices of the non-empty headers that are templated: their template is shared by at least
    _TEMPLATE_MIN_SHARED headers, or they near-duplicate another header."""
    templates = {i: _header_template(headers[i], texts[i]) for i in present}
    counts = Counter(t for t in templates.values() if t)
    templated = {i for i, t in templates.items() if t and counts[t] >= _TEMPLATE_MIN_SHARED}
    templated |= _near_duplicates(headers, present)
    return templated


def _mean_token_jaccard(headers: list[str], texts: list[str]) -> float:
    """Mean token Jaccard of each (non-empty) header and its chunk: the similarity without an embedder."""
    return sum(_token_jaccard(h, t) for h, t in zip(headers, texts)) / len(headers)


def _embedding_similarity(
    headers: list[str],
    texts: list[str],
    embed: Callable[[list[str]], list[list[float]]],
) -> tuple[float, float]:
    """Mean header/chunk cosine, and the share of chunks whose header + text embedding lies closer to
    the header than to the text (header dominance); `embed` is called three times, one batch each."""
    header_vectors = embed(headers)
    text_vectors = embed(texts)
    joint_vectors = embed([f"{h}\n\n{t}" for h, t in zip(headers, texts)])
    similarity = float(np.mean(_cosines(header_vectors, text_vectors)))
    to_header = _cosines(joint_vectors, header_vectors)
    to_text = _cosines(joint_vectors, text_vectors)
    return similarity, float(np.mean(to_header > to_text))


def header_sample(chunks: list) -> list:
    """At most HEADER_SAMPLE chunks, evenly spread (both header checks judge the same ones): embedding every
    chunk of a large index on a CPU would cost minutes."""
    if len(chunks) <= HEADER_SAMPLE:
        return chunks
    return [chunks[i * len(chunks) // HEADER_SAMPLE] for i in range(HEADER_SAMPLE)]


_VECTORS: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
VECTORS_KEPT = 20_000


def remembered(model: Embedder) -> Callable[[list[str]], list[list[float]]]:
    """`model.embed` remembering each text's vector in this process: the two header checks embed the same
    chunk texts, and evaluations of versions derived from one another share most of them."""
    def embed(texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if (model.identity, t) not in _VECTORS]
        for text, vector in zip(missing, model.embed(missing) if missing else []):
            _VECTORS[(model.identity, text)] = vector
        while len(_VECTORS) > VECTORS_KEPT:
            _VECTORS.popitem(last=False)
        # A vector evicted by a concurrent caller is embedded again rather than missed.
        return [_VECTORS[(model.identity, t)] if (model.identity, t) in _VECTORS else model.embed([t])[0]
                for t in texts]

    return embed
