"""The current index version comes from configuration and the served model's identity alone: no
request pool is started to name it."""

from __future__ import annotations

from contextual_assets.defs.resources import (
    EmbedderResource,
    HeaderSourceResource,
    ParsingResource,
    current_index_version,
)
from contextual_assets.fleet import pool
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY, ServedModel
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.parsing.tokens import token_counter


def test_a_pinned_model_names_the_version_without_a_pool_or_a_network():
    # Port 9 on loopback (discard) is closed: any request would fail.
    headers = HeaderSourceResource(source="openai", base_urls="http://127.0.0.1:9/v1", model="qwen-3b", revision="r2")
    version = current_index_version(headers, EmbedderResource(), ParsingResource())
    assert version.startswith("iv-") and not pool._FLEETS
    assert headers.identity() == {"header_source": "openai", "header_model": "qwen-3b@r2", "prompt_version": "header-v1"}
    other = current_index_version(headers.model_copy(update={"revision": "r3"}), EmbedderResource(), ParsingResource())
    assert other != version


def test_identity_matches_the_built_source_for_a_discovered_model(monkeypatch):
    served = {"http://gpu-1:8000/v1": [ServedModel(id="Qwen/Qwen2.5-3B-Instruct", max_model_len=8192)]}
    monkeypatch.setattr(DEFAULT_DISCOVERY, "fetch", lambda url, key, **_: served[url])
    monkeypatch.setattr(DEFAULT_DISCOVERY, "_cache", {})
    headers = HeaderSourceResource(source="openai", base_urls="http://gpu-1:8000", batch_size=4)
    identity = headers.identity()
    assert not pool._FLEETS
    assert identity["header_model"] == "Qwen/Qwen2.5-3B-Instruct"
    assert identity["prompt_version"] == "header-v1+header-batch-v1/k4"
    # The source a run builds (with its request pool) reports the same identity.
    source = headers.build(token_counter())
    try:
        assert isinstance(source, OpenAIHeaderSource) and source.identity == identity
    finally:
        pool.close_fleets()


def test_structural_and_none_need_no_endpoint():
    assert HeaderSourceResource(source="structural").identity()["header_source"] == "structural"
    assert HeaderSourceResource(source="none").identity() == {"header_source": "none", "header_model": "-",
                                                              "prompt_version": "-"}
