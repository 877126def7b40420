"""Errors a user can cause, or a service that is down. Each carries a message that names the file (or
the service) and the reason."""

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


class SchemaOutdated(ConfigurationError):
    """The store's schema is not the one this release needs: behind it (`ctx migrate` brings it up), or
    migrated by a newer release. Raised by a process that opens the store without migrating it."""

    def __init__(self, message: str, current: int, needed: int):
        super().__init__(message)
        self.current = current  # the store's schema version (0: never migrated)
        self.needed = needed  # this release's

    @property
    def newer(self) -> bool:
        """The store was migrated by a newer release (nothing to run here)."""
        return self.current > self.needed


class HeaderGenerationError(ContextualError):
    """The header source could not produce a valid header."""

    attempts: int = 0  # requests sent for it before giving up (the fleet sets it; 0: none or unknown)


class StoreError(ContextualError):
    """The chunk store rejected an operation."""


class AliasMoved(StoreError):
    """The alias no longer points where the caller compared against (another promotion came first)."""

    def __init__(self, message: str, current: str | None):
        super().__init__(message)
        self.current = current


class StaleDocumentError(StoreError):
    """A run's document is no longer the registered one (changed or removed meanwhile)."""


class DependencyUnavailable(ContextualError):
    """A service the operation needs (the database, the header fleet, the search service) cannot be
    reached: nothing is wrong with the request, it may pass once the service is back (`ctx` exits 3)."""


class StoreUnavailable(StoreError, DependencyUnavailable):
    """The chunk store's database cannot be reached."""


class FleetUnavailable(ConfigurationError, DependencyUnavailable):
    """A header replica does not answer. A ConfigurationError too, as discovery failures were before."""
