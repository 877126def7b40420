"""Retrievers for application frameworks over the search service (`ctx serve`): LlamaIndex
(`retrievers.llamaindex`, extra `llamaindex`) and LangChain (`retrievers.langchain`, extra `langchain`).
Each is an optional extra; nothing in the platform imports them."""
