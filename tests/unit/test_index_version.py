"""The current index version comes from configuration, the served model's identity and the PDF parser's
version alone: no request pool is started to name it."""

from __future__ import annotations

from importlib import metadata

import pytest

from contextual_assets import index_version
from contextual_assets.defs.resources import (
    EmbedderResource,
    HeaderSourceResource,
    ParsingResource,
)
from contextual_assets.errors import ConfigurationError
from contextual_assets.headers.cache_key import HEADER_KEY_SCHEME
from contextual_assets.fleet import pool
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY, ServedModel
from contextual_assets.index_version import current_index_version, index_fingerprint, index_version_of
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.parsing.tokens import token_counter
from contextual_assets.parsing.pdf import parser_version


def serve(monkeypatch, served: dict[str, list[ServedModel]]) -> list[str]:
    """`DEFAULT_DISCOVERY` answers `served` (no network), with an empty cache; the URLs it was asked."""
    calls: list[str] = []

    def fetch(url, key, **_):
        calls.append(url)
        return served[url]

    monkeypatch.setattr(DEFAULT_DISCOVERY, "fetch", fetch)
    monkeypatch.setattr(DEFAULT_DISCOVERY, "_cache", {})
    return calls


def test_a_pinned_model_names_the_version_by_its_weights_without_a_pool(monkeypatch):
    served = {"http://127.0.0.1:9/v1": [ServedModel(id="qwen-3b", max_model_len=8192, root="Qwen/Qwen2.5-3B-Instruct")]}
    calls = serve(monkeypatch, served)
    headers = HeaderSourceResource(source="openai", base_urls="http://127.0.0.1:9/v1", model="qwen-3b", revision="r2")
    version = current_index_version(headers, EmbedderResource(), ParsingResource())
    assert version.startswith("iv-") and not pool._FLEETS
    assert calls == ["http://127.0.0.1:9/v1"], "the pin is checked against /v1/models"
    assert headers.identity() == {"header_source": "openai", "header_model": "Qwen/Qwen2.5-3B-Instruct@r2",
                                  "prompt_version": "header-v2", "header_cache_key": HEADER_KEY_SCHEME}
    other = current_index_version(headers.model_copy(update={"revision": "r3"}), EmbedderResource(), ParsingResource())
    assert other != version
    # The same pinned name over other weights is another index version.
    served["http://127.0.0.1:9/v1"] = [ServedModel(id="qwen-3b", max_model_len=8192, root="Qwen/Qwen2.5-7B-Instruct")]
    DEFAULT_DISCOVERY.clear()
    assert current_index_version(headers, EmbedderResource(), ParsingResource()) != version


def test_a_pin_that_is_not_served_names_the_variable(monkeypatch):
    serve(monkeypatch, {"http://127.0.0.1:9/v1": [ServedModel(id="qwen-7b")]})
    headers = HeaderSourceResource(source="openai", base_urls="http://127.0.0.1:9/v1", model="qwen-3b")
    with pytest.raises(ConfigurationError, match=r"CTX_LLM_MODEL='qwen-3b' is not served by "
                                                 r"http://127\.0\.0\.1:9/v1 \(it serves \['qwen-7b'\]\)"):
        current_index_version(headers, EmbedderResource(), ParsingResource())
    assert not pool._FLEETS


def test_identity_matches_the_built_source_for_a_discovered_model(monkeypatch):
    served = {"http://gpu-1:8000/v1": [ServedModel(id="qwen", max_model_len=8192, root="Qwen/Qwen2.5-3B-Instruct")]}
    serve(monkeypatch, served)
    headers = HeaderSourceResource(source="openai", base_urls="http://gpu-1:8000", batch_size=4)
    identity = headers.identity()
    assert not pool._FLEETS
    assert identity["header_model"] == "Qwen/Qwen2.5-3B-Instruct", "the weights, not the served name"
    assert identity["prompt_version"] == "header-v2+header-batch-v1/k4"
    # The source a run builds (with its request pool) reports the same identity.
    source = headers.build(token_counter())
    try:
        assert isinstance(source, OpenAIHeaderSource) and source.identity == identity
        assert source.served_model == source.model == "qwen", "requests use the served name"
    finally:
        pool.close_fleets()


def test_structural_and_none_need_no_endpoint():
    assert HeaderSourceResource(source="structural").identity()["header_source"] == "structural"
    assert HeaderSourceResource(source="none").identity() == {"header_source": "none", "header_model": "-",
                                                              "prompt_version": "-"}


NO_HEADERS = {"header_source": "none", "header_model": "-", "prompt_version": "-"}


def test_the_pdf_parsers_version_is_part_of_the_fingerprint():
    """A PyMuPDF upgrade can change the chunks, so it builds another index version; the same parser, the same one."""
    fingerprint = index_fingerprint(NO_HEADERS, "embedder-a", 512)
    assert fingerprint["parser"] == parser_version() == f"pymupdf-{metadata.version('pymupdf')}"
    assert fingerprint["chunker"].endswith("/512"), "the chunk budget is read back from `chunker`"
    assert index_version_of(fingerprint) == index_version_of(index_fingerprint(NO_HEADERS, "embedder-a", 512))
    assert index_fingerprint(NO_HEADERS, "embedder-a", 512, parser=parser_version()) == fingerprint
    upgraded = index_fingerprint(NO_HEADERS, "embedder-a", 512, parser="pymupdf-2.0.1")
    assert index_version_of(upgraded) != index_version_of(fingerprint)


def test_the_current_index_version_follows_the_installed_parser(monkeypatch):
    """Another installed PyMuPDF cannot be had in a test, so `parser_version` (ours; it reads the
    installed distribution's metadata) is replaced where the fingerprint looks it up."""
    headers = HeaderSourceResource(source="none")
    version = current_index_version(headers, EmbedderResource(), ParsingResource())
    assert current_index_version(headers, EmbedderResource(), ParsingResource()) == version, "stable"
    monkeypatch.setattr(index_version, "parser_version", lambda: "pymupdf-99.0")
    assert current_index_version(headers, EmbedderResource(), ParsingResource()) != version
