"""The header fleet: one request pool across many OpenAI-compatible replicas.

Import the module you need (`fleet.config`, `fleet.pool`, `fleet.routing`, ...): the package itself
imports nothing, so reading settings (`fleet.config`) does not load httpx, asyncio and the pool.
"""
