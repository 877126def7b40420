"""One process per run, not per step: a step process costs ~3 s of imports per document."""

import dagster as dg

defs = dg.Definitions(executor=dg.in_process_executor)
