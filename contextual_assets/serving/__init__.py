"""Serving the index: the search service (`ctx serve`), its API models and its HTTP client."""
