"""Evaluation of retrieval quality: gold sets, graders, and (next) the promotion gate."""
