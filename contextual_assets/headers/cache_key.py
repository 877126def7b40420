"""Header-cache keys: (model weights, pinned revision, prompt version, context hash, chunk hash).

A re-run with unchanged settings, or after a crash, makes no LLM call for a chunk whose header is
cached; changing any key part changes the key (and the index version). The first part is the
weights' identity (`ResolvedModel.weights`), not the served name: a name that now serves other
weights misses the cache instead of mixing old-model headers with new ones."""

from __future__ import annotations

import hashlib


def header_cache_key(weights: str, revision: str, prompt_version: str, context: str, chunk_hash: str) -> str:
    context_hash = hashlib.sha256(context.encode("utf-8")).hexdigest()
    material = "\x1f".join([weights, revision, prompt_version, context_hash, chunk_hash])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
