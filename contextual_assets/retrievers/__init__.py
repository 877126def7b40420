"""The retrievers now live in the client package (`ctx_search_client.llamaindex`,
`ctx_search_client.langchain`; clients/python/): these modules re-export them for code that imports
them from here. Nothing in the platform imports them."""
