"""Contextual-retrieval ingestion on Dagster: documents -> section-aware chunks -> LLM situating headers ->
embeddings -> a hybrid index (see README, "Where things live")."""
