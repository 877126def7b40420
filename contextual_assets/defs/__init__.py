"""Dagster definitions of the code location: assets, the inbox sensor, resources and partitions; the one
`Definitions` object is in `definitions.py`."""
