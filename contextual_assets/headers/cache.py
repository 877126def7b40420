"""Header-cache keys: (served model, pinned revision, prompt version, context hash, chunk hash).

A re-run with unchanged settings, or after a crash, makes no LLM call for a chunk whose header is
cached; changing any key part changes the key (and the index version)."""

from __future__ import annotations

import hashlib


def header_cache_key(model: str, revision: str, prompt_version: str, context: str, chunk_hash: str) -> str:
    context_hash = hashlib.sha256(context.encode("utf-8")).hexdigest()
    material = "\x1f".join([model, revision, prompt_version, context_hash, chunk_hash])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
