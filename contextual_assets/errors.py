"""Errors a user can cause. Each carries a message that names the file and the reason."""

from __future__ import annotations


class ContextualError(Exception):
    """Base class for errors with a user-facing message."""


class DocumentError(ContextualError):
    """A single document cannot be ingested; other documents are unaffected."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ConfigurationError(ContextualError):
    """Settings are missing or inconsistent."""


class HeaderGenerationError(ContextualError):
    """The header source could not produce a valid header."""


class StoreError(ContextualError):
    """The chunk store rejected an operation."""


class StaleDocumentError(StoreError):
    """A run's document is no longer the registered one (changed or removed meanwhile)."""
