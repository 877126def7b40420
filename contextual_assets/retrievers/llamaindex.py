"""Re-exports `ctx_search_client.llamaindex.ContextualRetriever` (the LlamaIndex retriever; needs the
`llamaindex` extra: llama-index-core)."""

from ctx_search_client.llamaindex import ContextualRetriever

__all__ = ["ContextualRetriever"]
