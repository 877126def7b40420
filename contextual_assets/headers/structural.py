"""Deterministic headers with no LLM: title, section path, and what the chunk defines or mentions."""

from __future__ import annotations

import re
from collections import Counter

from .base import HeaderRequest, HeaderResult, HeaderSource

STRUCTURAL_VERSION = "structural-v1"

_DEFINITION = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+|export\s+|async\s+|public\s+|private\s+|static\s+)*"
    r"(?:def|class|fn|struct|enum|trait|impl|interface|func|function|type|mod)\s+(?:<[^>]*>\s*)?([A-Za-z_]\w*)",
    re.MULTILINE,
)
_TERM = re.compile(r"\b(?:[A-Z][\w-]*(?:\s+(?:of|for|and|de|du|la|le)?\s*[A-Z][\w-]*)*|\w+_\w+|[A-Z]{2,}\d*)\b")
_COMMON = frozenset("The This That These Those A An In On At For And But Or If When It Its We You They He She".split())


def describe_chunk(text: str, limit: int = 4) -> tuple[list[str], list[str]]:
    """(names the chunk defines, salient terms it mentions), deterministic."""
    defined = list(dict.fromkeys(_DEFINITION.findall(text)))[:limit]
    counts = Counter(m.strip() for m in _TERM.findall(text))
    terms = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
             if t not in _COMMON and t not in defined and len(t) > 2][:limit]
    return defined, terms


def structural_header(title: str, section_path: list[str], text: str, page: int | None = None) -> str:
    where = f"section {' > '.join(section_path)}" if section_path else "the main text"
    page_part = f" (page {page})" if page else ""
    sentence = f"From {title}, {where}{page_part}."
    defined, terms = describe_chunk(text)
    if defined:
        sentence += f" Defines {', '.join(defined)}."
    elif terms:
        sentence += f" Mentions {', '.join(terms)}."
    return sentence


class StructuralHeaderSource(HeaderSource):
    name = "structural"

    @property
    def identity(self) -> dict[str, str]:
        return {"header_source": "structural", "header_model": STRUCTURAL_VERSION, "prompt_version": "-"}

    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        return [
            HeaderResult(
                header=structural_header(r.chunk.title, r.chunk.section_path, r.chunk.text, r.chunk.page_start),
                source="structural",
                model=STRUCTURAL_VERSION,
            )
            for r in requests
        ]


class NoHeaderSource(HeaderSource):
    name = "none"

    @property
    def identity(self) -> dict[str, str]:
        return {"header_source": "none", "header_model": "-", "prompt_version": "-"}

    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        return [HeaderResult(header="", source="none") for _ in requests]
