"""The gold set: tasks keyed to raw chunk text (`gold_set`), their hygiene against one index
version (`hygiene`: living, stale or broken), and the within-section needle generator (`needles`,
with its fact templates in `needle_facts`)."""
