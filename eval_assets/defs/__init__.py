"""The evaluation's Dagster definitions, composed into the one code location by
`contextual_assets/definitions.py`: `retrieval_eval.py` (per document partition, with its automation),
`assets.py` (`candidate_evaluation` with eval_gate, header_integrity, gold_hygiene and header_diagnostics;
`promoted_index` with production_freshness) and `jobs.py`. Library code stays above, in
`eval_assets/`."""
