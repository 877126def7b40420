"""Re-exports `ctx_search_client.langchain.ContextualRetriever` (the LangChain retriever; needs the
`langchain` extra: langchain-core)."""

from ctx_search_client.langchain import ContextualRetriever

__all__ = ["ContextualRetriever"]
