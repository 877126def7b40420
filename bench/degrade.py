"""Derived index versions for gate benchmarks and tests: a copy of an existing version with its
chunks transformed (headers swapped between chunks, chunks truncated to their first line, or
unchanged), re-embedded and committed under a new index version. Not part of the product path."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from contextual_assets.embedding import Embedder
from contextual_assets.index_version import index_version_of
from contextual_assets.models import HeaderedChunk, content_hash
from contextual_assets.embedding import embed_chunks
from contextual_assets.store import ChunkStore

Transform = Callable[[list[HeaderedChunk]], list[HeaderedChunk]]


def unchanged(chunks: list[HeaderedChunk]) -> list[HeaderedChunk]:
    return chunks


def swap_headers(chunks: list[HeaderedChunk]) -> list[HeaderedChunk]:
    """Each chunk gets the header of the chunk that follows it in its document (rotated)."""
    if len(chunks) < 2:
        return chunks
    headers = [c.header for c in chunks]
    return [c.model_copy(update={"header": headers[(i + 1) % len(chunks)]}) for i, c in enumerate(chunks)]


def truncate_to_first_line(chunks: list[HeaderedChunk]) -> list[HeaderedChunk]:
    out = []
    for chunk in chunks:
        text = next((line for line in chunk.text.splitlines() if line.strip()), chunk.text)
        out.append(chunk.model_copy(update={"text": text, "content_hash": content_hash(text)}))
    return out


TRANSFORMS: dict[str, Transform] = {"unchanged": unchanged, "swap_headers": swap_headers,
                                    "truncate_first_line": truncate_to_first_line}


def derive_version(store: ChunkStore, embedder: Embedder, source_version: str, transform: str) -> str:
    fingerprint = next(v["fingerprint"] for v in store.index_versions() if v["index_version"] == source_version)
    derived = {**fingerprint, "derived_from": source_version, "transform": transform}
    version = index_version_of(derived)
    store.register_index_version(version, derived)
    by_doc: dict[str, list[HeaderedChunk]] = defaultdict(list)
    for chunk in store.chunks(source_version):
        by_doc[chunk.doc_id].append(chunk)
    documents = {d.doc_id: d for d in store.documents(source_version)}
    for doc_id, chunks in by_doc.items():
        embedded = embed_chunks(TRANSFORMS[transform](chunks), embedder)
        record = documents[doc_id].model_copy(update={"index_version": version, "n_chunks": len(embedded)})
        store.replace_document(record, embedded)
    return version
