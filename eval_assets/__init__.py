"""Evaluation of retrieval quality: gold sets (`gold/`), rank-aware metrics and graders
(`ranking_metrics`), header diagnostics (`diagnostics`), the evaluator (`evaluate`), the promotion
gate (`gate`), and the Dagster assets and checks that run them (`assets`, `resources`, `dashboard`)."""
