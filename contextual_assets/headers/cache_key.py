"""Header-cache keys: (model weights, pinned revision, prompt version, the rendered prompt, chunk hash).

A re-run with unchanged settings, or after a crash, makes no LLM call for a chunk whose header is
cached; changing any key part changes the key (and the index version). The first part is the
weights' identity (`ResolvedModel.weights`), not the served name: a name that now serves other
weights misses the cache instead of mixing old-model headers with new ones.

The key covers the whole rendered prompt (system and user messages: the document's title, the section
path, the context and the chunk), not only the context: two documents that share a paragraph (a
standard clause in two contracts) differ in title and section, and each gets a header written for it.
`HEADER_KEY_SCHEME` names this rule in the index version, so headers cached under an older rule can
never reach a version built under this one."""

from __future__ import annotations

import hashlib
import json

# Part of the index-version fingerprint of headers from a served model (`openai_identity`): bump it
# whenever what the key covers changes.
HEADER_KEY_SCHEME = "rendered-prompt-v1"


def header_cache_key(weights: str, revision: str, prompt_version: str, messages: list[dict[str, str]],
                     chunk_hash: str) -> str:
    prompt_hash = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    material = "\x1f".join([HEADER_KEY_SCHEME, weights, revision, prompt_version, prompt_hash, chunk_hash])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
