"""Dagster only, one folder per domain, loaded by `dg.load_from_defs_folder` (see
`contextual_assets/definitions.py`): `ingest/` (the pipelined ingest assets, the inbox sensor, the
ingest job), `evaluation/` (retrieval_eval, the gate and the other checks, promotion), `resources.py`
(thin adapters over library configurations) and `executor.py`. Domain logic lives below, in the library."""
