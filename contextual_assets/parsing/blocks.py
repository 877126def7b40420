from __future__ import annotations

from pydantic import BaseModel, Field


class Block(BaseModel):
    """A run of text that belongs to one section; the chunker never merges across sections."""

    text: str
    section_path: list[str] = Field(default_factory=list)
    page: int | None = None  # 1-based, PDFs only
    source_doc: str | None = None  # pre-chunked imports: the logical document
    title: str | None = None
    # Pre-chunked imports keep their chunks exactly as given.
    fixed_chunk: bool = False
    external_id: str | None = None
    # Code blocks are split on line boundaries rather than sentences.
    is_code: bool = False


class ParsedSource(BaseModel):
    kind: str
    title: str
    blocks: list[Block]
    pages: int | None = None
    warnings: list[str] = Field(default_factory=list)
