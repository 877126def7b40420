"""The document pipeline one ingest step runs: its types and shared state (`types`, `state`), the four
stages (`parse_stage` with `parse`, `header_stage`, `embed_stage`, `commit_stage`), the pipeline that
joins them (`document_pipeline`), several pipelines in one run (`concurrent`) and what a run builds
(`run_plan`)."""
