"""Situating headers for chunks: an LLM over an OpenAI-compatible API, a structural fallback, or none."""

from .base import HeaderRequest, HeaderResult, HeaderSource
from .validation import HeaderValidationError, validate_header

__all__ = ["HeaderRequest", "HeaderResult", "HeaderSource", "HeaderValidationError", "validate_header"]
