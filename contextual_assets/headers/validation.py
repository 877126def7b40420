"""Every generated header is checked before it is embedded: never a silent bad header."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from ..errors import HeaderGenerationError

_SENTENCE_END = re.compile(r"[.!?。؟](?:\s|$)")


class HeaderValidationError(HeaderGenerationError):
    pass


def clean_header(raw: str) -> str:
    text = raw.strip().strip('"').strip()
    # Small models like to prefix their answer; strip common lead-ins.
    text = re.sub(r"^(?:header|answer|context|sentence)\s*:\s*", "", text, flags=re.IGNORECASE)
    return " ".join(text.split())


def validate_header(header: str, chunk_text: str, *, max_tokens: int, count_tokens) -> str:
    """Return the cleaned header or raise HeaderValidationError with the reason."""
    text = clean_header(header)
    if not text:
        raise HeaderValidationError("empty header")
    tokens = count_tokens(text)
    if tokens > max_tokens:
        raise HeaderValidationError(f"header has {tokens} tokens, over the limit of {max_tokens}")
    sentences = len(_SENTENCE_END.findall(text + " "))
    if sentences > 2:
        raise HeaderValidationError(f"header has {sentences} sentences; one or two are allowed")
    normalised_chunk = " ".join(chunk_text.split()).lower()
    normalised_header = text.lower()
    if len(normalised_header) >= 30 and normalised_header in normalised_chunk:
        raise HeaderValidationError("header copies the chunk text")
    if SequenceMatcher(None, normalised_header, normalised_chunk[: len(normalised_header) * 2]).ratio() > 0.9:
        raise HeaderValidationError("header copies the chunk text")
    return text
