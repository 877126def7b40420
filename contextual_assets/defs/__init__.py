"""Dagster only, loaded by `dg.load_from_defs_folder` (see `contextual_assets/definitions.py`): `ingest/`
(the pipelined ingest assets, the inbox sensor, the ingest job), `resources.py` (thin adapters over the
configured deployment's configurations) and `executor.py`. The evaluation's definitions are beside its
library, in `eval_assets/defs/`. Domain logic lives below, in the library."""
