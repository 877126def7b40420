"""Evaluation of retrieval quality: the library (no Dagster) — gold sets (`gold/`), rank-aware metrics and
graders (`ranking_metrics`), header diagnostics (`diagnostics`), the evaluator (`evaluate`), the promotion
gate's rules (`gate`, `significance`), its configuration (`gate_config`) and the dashboard tables
(`dashboard`) — and, in `defs/`, the Dagster definitions that run it: `retrieval_eval`, the whole-candidate
decision with its checks, promotion and the evaluation jobs."""
