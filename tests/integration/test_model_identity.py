"""The index version and the header cache follow the weights behind a served name, not the name:
against the vLLM-like fleet simulator (real HTTP on loopback), whose /admin/model moves a served
name to other weights at run time, as a compatibility alias re-pointed at a new model would be."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from bench.sim import FleetSimulator, ReplicaSpec
from contextual_assets.defs.resources import build_resources
from contextual_assets.index_version import current_index_version
from contextual_assets.errors import ConfigurationError
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY, ModelDiscovery
from contextual_assets.fleet.pool import HeaderFleet
from contextual_assets.headers.base import HeaderRequest
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.headers.prompt import load_prompt
from contextual_assets.models import Chunk, content_hash
from contextual_assets.parsing.tokens import token_counter
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import open_store


@pytest.fixture
def sim():
    specs = [ReplicaSpec(root="org/weights-v1", max_model_len=8192),
             ReplicaSpec(root="org/weights-v1", max_model_len=4096)]
    with FleetSimulator(specs, time_scale=0.05) as fleet:
        DEFAULT_DISCOVERY.clear()
        yield fleet
    DEFAULT_DISCOVERY.clear()


def swap_weights(sim: FleetSimulator, root: str, replicas: list[int] | None = None) -> None:
    """POST /admin/model: the served name ("sim-model") now serves `root`."""
    for i in replicas if replicas is not None else range(len(sim.base_urls)):
        admin = sim.base_urls[i].removesuffix("/v1") + "/admin/model"
        entry = httpx.post(admin, json={"root": root}, timeout=10).json()
        assert (entry["id"], entry["root"]) == ("sim-model", root)


def version_of(sim: FleetSimulator, tmp_path, **overrides) -> str:
    values = {"header_source": "openai", "llm_base_urls": ",".join(sim.base_urls), "llm_model": "",
              "home": str(tmp_path / ".ctx"), **overrides}
    settings = PlatformSettings(**values)
    resources = build_resources(settings)
    return current_index_version(resources["headers"], resources["embedder"], resources["parsing"])


def test_the_same_name_over_other_weights_is_another_index_version(sim, tmp_path):
    before = version_of(sim, tmp_path)
    DEFAULT_DISCOVERY.clear()
    assert version_of(sim, tmp_path) == before, "nothing changed: the same version"

    swap_weights(sim, "org/weights-v2")
    DEFAULT_DISCOVERY.clear()
    after = version_of(sim, tmp_path)
    assert after != before
    # A pin on the served name names the same weights, so the same version as discovery.
    assert version_of(sim, tmp_path, llm_model="sim-model") == after

    swap_weights(sim, "org/weights-v1")
    DEFAULT_DISCOVERY.clear()
    assert version_of(sim, tmp_path) == before, "the old weights again: the old version again"


def test_one_name_over_different_weights_across_replicas_is_an_error(sim, tmp_path):
    swap_weights(sim, "org/weights-v2", replicas=[1])
    DEFAULT_DISCOVERY.clear()
    with pytest.raises(ConfigurationError, match="replicas serve different models") as info:
        version_of(sim, tmp_path)
    assert "sim-model (weights org/weights-v2)" in str(info.value)


def test_a_pin_is_checked_against_the_served_models(sim, tmp_path):
    with pytest.raises(ConfigurationError) as info:
        version_of(sim, tmp_path, llm_model="not-served")
    assert str(info.value).startswith(f"CTX_LLM_MODEL='not-served' is not served by {sim.base_urls[0]} "
                                      "(it serves ['sim-model'])")
    # A served pin keeps request budgeting: the smallest max_model_len of the pinned model.
    fleet = make_fleet(sim, model="sim-model")
    with contextlib.closing(fleet):
        assert (fleet.model, fleet.weights, fleet.context_limit) == ("sim-model", "org/weights-v1", 4096)
        assert not fleet.resolved.discovered


def make_fleet(sim: FleetSimulator, **overrides) -> HeaderFleet:
    config = FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=8) for u in sim.base_urls], **overrides)
    return HeaderFleet(config, discovery=ModelDiscovery())


def chunk_requests(n: int) -> list[HeaderRequest]:
    chunks = []
    for i in range(n):
        text = " ".join(f"clause{i}term{j}" for j in range(40)) + "."
        chunks.append(Chunk(doc_id="doc", source_doc="doc", title="Contract", ordinal=i, section_path=["Terms"],
                            text=text, token_count=40, content_hash=content_hash(text)))
    return [HeaderRequest(chunk=c, before=[], after=[]) for c in chunks]


def test_header_cache_misses_when_the_name_serves_other_weights(sim, tmp_path):
    store = open_store(None, tmp_path / "s.duckdb")

    def run() -> tuple[OpenAIHeaderSource, int]:
        """Headers for 5 chunks from a fresh pool (fresh discovery); the simulator's completions it cost."""
        completed = sum(s["completed"] for s in sim.stats())
        with contextlib.closing(make_fleet(sim)) as fleet:
            source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(),
                                        header_cache=store.header_cache if store is not None else None)
            assert len(source.generate(chunk_requests(5))) == 5
        return source, sum(s["completed"] for s in sim.stats()) - completed

    first, cost = run()
    assert first.last_stats.cache_hits == 0 and cost == 5
    assert (first.served_model, first.weights) == ("sim-model", "org/weights-v1")
    again, cost = run()
    assert again.last_stats.cache_hits == 5 and cost == 0, "same weights: every header from the cache"

    swap_weights(sim, "org/weights-v2")
    swapped, cost = run()
    assert swapped.served_model == "sim-model" and swapped.weights == "org/weights-v2"
    assert swapped.identity["header_model"] == "org/weights-v2" != first.identity["header_model"]
    assert swapped.last_stats.cache_hits == 0 and cost == 5, "no old-model header is reused"
