"""The index version: a fingerprint of everything that changes what a chunk's vector means."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from contextual_assets.parsing.chunking import CHUNKER_VERSION

from .embedding import TEXT_LAYOUT_VERSION


def index_fingerprint(header_identity: dict[str, str], embedder_identity: str, chunk_tokens: int) -> dict[str, Any]:
    return {
        "header_source": header_identity["header_source"],
        "header_model": header_identity["header_model"],
        "prompt_version": header_identity["prompt_version"],
        "embedder": embedder_identity,
        "chunker": f"{CHUNKER_VERSION}/{chunk_tokens}",
        "text_layout": TEXT_LAYOUT_VERSION,
    }


def index_version_of(fingerprint: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    return f"iv-{digest}"
