"""Every generated header is checked before it is embedded: never a silent bad header."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from ..errors import HeaderGenerationError

_SENTENCE_END = re.compile(r"[.!?。؟](?:\s|$)")
# The prompt's own markup: its opening tags with their attributes, its closing tags, or document
# text as the prompt escapes it. A header holding one is the model echoing its prompt (or a
# document's instructions), never a description of the passage. (A bare "<chunk>" in an otherwise
# sound sentence is tolerated: small models write it when they mean "this passage".)
_PROMPT_MARKUP = re.compile(
    r"<\s*document\s+title\b|<\s*chunk\s+id\b|<\s*/\s*(?:document|chunk)\s*>|&lt;\s*/?\s*(?:document|chunk)\b",
    re.IGNORECASE,
)


class HeaderValidationError(HeaderGenerationError):
    pass


def clean_header(raw: str) -> str:
    text = raw.strip().strip('"').strip()
    # Small models like to prefix their answer; strip common lead-ins.
    text = re.sub(r"^(?:header|answer|context|sentence)\s*:\s*", "", text, flags=re.IGNORECASE)
    return " ".join(text.split())


def leading_sentences(text: str, max_sentences: int = 2) -> str:
    """The first complete sentences of a text (models often write a good sentence, then ramble or
    get cut off by the output-token limit)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text + " ")]
    if not ends:
        return ""
    return text[: ends[min(max_sentences, len(ends)) - 1]].strip()


def validate_header(header: str, chunk_text: str, *, max_tokens: int, count_tokens, salvage: bool = False) -> str:
    """Return the cleaned header or raise HeaderValidationError with the reason.

    With `salvage`, an answer that is too long or has too many sentences is cut to its leading
    complete sentences when those pass every check; an answer with no complete sentence is not.
    """
    text = clean_header(header)
    if not text:
        raise HeaderValidationError("empty header")
    if salvage:
        for sentences in (2, 1):
            candidate = leading_sentences(text, sentences)
            if candidate and count_tokens(candidate) <= max_tokens:
                if candidate != text:
                    text = candidate
                break
    if _PROMPT_MARKUP.search(text):
        raise HeaderValidationError("header contains the prompt's <document>/<chunk> markup (an echoed prompt)")
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
