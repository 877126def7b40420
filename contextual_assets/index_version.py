"""The index version: a fingerprint of everything that changes what a chunk's vector means, and the
version the current configuration builds."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Protocol

from contextual_assets.parsing.chunking import CHUNKER_VERSION
from contextual_assets.parsing.pdf import parser_version

from .embedding import TEXT_LAYOUT_VERSION

if TYPE_CHECKING:
    from contextual_assets.headers.configured import HeaderConfig
    from contextual_assets.parsing.config import ParsingConfig


class HasEmbedderIdentity(Protocol):
    def identity(self) -> str: ...


def index_fingerprint(header_identity: dict[str, str], embedder_identity: str, chunk_tokens: int, *,
                      parser: str | None = None) -> dict[str, Any]:
    """What makes a chunk's vector mean what it means; `parser`: the PDF parser's version (default: the
    installed one)."""
    fingerprint = {
        "header_source": header_identity["header_source"],
        "header_model": header_identity["header_model"],
        "prompt_version": header_identity["prompt_version"],
        "embedder": embedder_identity,
        "chunker": f"{CHUNKER_VERSION}/{chunk_tokens}",
        # The full version, not major.minor: any PyMuPDF release (its bundled MuPDF included) may extract a
        # PDF's text, spacing or reading order differently, which changes the chunks; an upgrade builds a new
        # index version, evaluated before it serves. Its own key: `chunker` keeps `<version>/<tokens>`, which
        # `lifecycle.build_targets.recorded_target` reads back.
        "parser": parser or parser_version(),
        "text_layout": TEXT_LAYOUT_VERSION,
    }
    # Only sources with a header cache have a key scheme: structural and empty headers keep their versions.
    if "header_cache_key" in header_identity:
        fingerprint["header_cache_key"] = header_identity["header_cache_key"]
    return fingerprint


def index_version_of(fingerprint: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
    return f"iv-{digest}"


def current_index_version(headers: HeaderConfig, embedder: HasEmbedderIdentity, parsing: ParsingConfig) -> str:
    """The index version the current configuration builds (no request pool, no model loaded)."""
    return index_version_of(index_fingerprint(headers.identity(), embedder.identity(), parsing.chunk_tokens))
