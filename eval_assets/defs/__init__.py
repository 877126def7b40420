"""The evaluation's Dagster definitions."""
