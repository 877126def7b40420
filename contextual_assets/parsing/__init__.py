"""Turn a source file into structured blocks (text with a section path and pages)."""

from .blocks import Block, ParsedSource
from .dispatch import SUPPORTED_EXTENSIONS, parse_file

__all__ = ["Block", "ParsedSource", "SUPPORTED_EXTENSIONS", "parse_file"]
