"""Contextual-retrieval ingestion on Dagster: documents -> section-aware chunks -> LLM situating headers ->
embeddings -> a hybrid index (see README, "Where things live")."""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "contextual-retrieval-platform"


def package_version() -> str:
    """The installed distribution's version (a checkout that was never installed says so)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"
