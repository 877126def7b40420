"""The gold set: tasks keyed to raw chunk text (`gold_set`) and their hygiene against one index
version (`hygiene`: living, stale or broken). The within-section needle generator is a benchmark
tool: `bench/needles.py`."""
