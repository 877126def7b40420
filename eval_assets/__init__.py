"""Evaluation of retrieval quality, as a library (no Dagster): gold sets (`gold/`), rank-aware metrics
and graders (`ranking_metrics`), header diagnostics (`diagnostics`), the evaluator (`evaluate`), the
promotion gate's rules (`gate`, `significance`), its configuration (`gate_config`) and the dashboard
tables (`dashboard`). The Dagster assets and checks that run them are in
`eval_assets/defs/`."""
