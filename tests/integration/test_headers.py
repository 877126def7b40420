"""Header sources against servers: the OpenAI-compatible source on a real llama.cpp server (two
replicas), discovery, and headers through the Dagster assets. Server-free header tests: tests/unit."""

from __future__ import annotations

import dagster as dg
import pytest

from contextual_assets.errors import ConfigurationError, HeaderGenerationError
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.discovery import ModelDiscovery
from contextual_assets.fleet.pool import HeaderFleet
from contextual_assets.headers.cache_key import HEADER_KEY_SCHEME
from contextual_assets.headers.context import header_requests
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.headers.prompt import load_prompt
from contextual_assets.ingest.pipeline.parse import parse_document
from contextual_assets.parsing.tokens import token_counter


def make_fleet(urls, **overrides) -> HeaderFleet:
    config = FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=2) for u in urls], **overrides)
    return HeaderFleet(config, discovery=ModelDiscovery())


def test_openai_source_against_llama_cpp(llama_server, samples_dir):
    counter = token_counter()
    fleet = make_fleet([llama_server], max_attempts=3)
    try:
        source = OpenAIHeaderSource(fleet, load_prompt(), counter)
        assert source.model == "smollm2-135m-instruct", "discovered from /v1/models"
        assert fleet.context_limit is None, "llama.cpp does not report max_model_len"
        assert source.identity == {"header_source": "openai", "header_model": "smollm2-135m-instruct",
                                   "prompt_version": "header-v2", "header_cache_key": HEADER_KEY_SCHEME}
        doc = parse_document("n", samples_dir / "release_notes.txt", counter, chunk_tokens=120, max_bytes=10**8,
                             max_pdf_pages=10)
        requests = header_requests(doc, counter, 400)[:3]
        results = source.generate(requests)
        assert len(results) == 3
        for result, request in zip(results, requests):
            assert result.source == "openai" and result.model == "smollm2-135m-instruct"
            assert result.prompt_tokens > 0 and result.completion_tokens > 0
            assert result.header and result.header != request.chunk.text
        # Answers per replica (the share metadata), and requests = answers + retries (SmolLM's answers
        # are sometimes invalid and retried).
        assert source.last_stats.per_replica == {llama_server: 3}
        assert source.last_stats.requests == 3 + source.last_stats.retries
    finally:
        fleet.close()


def test_real_model_headers_pass_the_header_integrity_check(llama_server, samples_dir, settings_factory):
    """The header_integrity thresholds let a real (if small) model's headers pass: they are in their
    chunk's language, carry no instruction, name no other document, are not one template, and fit their own
    chunk better than chance.

    What holds on any CPU. The model's output depended on the CPU while llama.cpp was built for the build
    machine's (-march=native: other kernels, other rounding); with the portable build (one instruction set,
    one thread, greedy first attempts, seeded retries) it is the same wherever it runs, but a 135M model's
    `header_fit` is still a share of a small sample: 0.80 and 0.50 were measured over 20 headers on two
    CPUs (issue 39), a pair or two moving it by 0.1. So: 32 headers, every signal but the fit held to the
    gate's thresholds, and the fit to better than chance, which is what the gate's 0.6 stands for at this
    sample's standard error (2 x sqrt(0.25 / 32) = 0.18 below it is under 0.5)."""
    from contextual_assets.defs.resources import build_resources
    from eval_assets.header_integrity import MIN_HEADER_FIT, header_integrity

    embedder = build_resources(settings_factory())["embedder"].get()
    counter = token_counter()
    fleet = make_fleet([llama_server], max_attempts=3)
    try:
        source = OpenAIHeaderSource(fleet, load_prompt(), counter)
        requests = []
        for name in ("release_notes.txt", "architecture_notes.md", "supply_agreement.pdf", "rate_limiter.py"):
            doc = parse_document(name, samples_dir / name, counter, chunk_tokens=120, max_bytes=10**8,
                                 max_pdf_pages=10)
            requests += header_requests(doc, counter, 400)[:8]
        answered = []
        for request in requests:  # SmolLM2-135M sometimes echoes the prompt three times over: left out
            try:
                answered.append((request.chunk, source.generate([request])[0].header))
            except HeaderGenerationError:
                pass
    finally:
        fleet.close()
    assert len(answered) >= 24, f"{len(answered)} of {len(requests)} answered"
    headers = [h for _, h in answered]
    chunks = [c for c, _ in answered]
    signals = header_integrity(headers, [c.text for c in chunks], [c.source_doc for c in chunks],
                               {c.source_doc: c.title for c in chunks}, embed=embedder.embed)
    assert signals["headers"] == len(answered) and signals["header_fit"] is not None
    print(f"header_fit {signals['header_fit']:.3f} over {len(answered)} headers")
    assert [r for r in signals["reasons"] if "fit their own chunk" not in r] == [], (signals, headers)
    margin = 2 * (0.25 / len(answered)) ** 0.5
    assert signals["header_fit"] > max(0.5, MIN_HEADER_FIT - margin), (signals, headers)


def test_unanswerable_chunk_is_an_explicit_error(llama_server, tmp_path):
    # max_header_tokens=1 cannot be met by any answer: the error names the chunk and the reasons.
    counter = token_counter()
    fleet = make_fleet([llama_server], max_attempts=2)
    try:
        source = OpenAIHeaderSource(fleet, load_prompt(), counter, max_header_tokens=1, max_output_tokens=16)
        note = tmp_path / "note.txt"
        note.write_text("The night shift closes the loading dock at 23:00 and logs the seal numbers.")
        doc = parse_document("n", note, counter, chunk_tokens=120, max_bytes=10**6, max_pdf_pages=1)
        with pytest.raises(HeaderGenerationError, match="chunk 0 of n: no valid answer after 2 attempts"):
            source.generate(header_requests(doc, counter, 200)[:1])
        assert fleet.counters.invalid == 2 and fleet.counters.sent == 2
    finally:
        fleet.close()


def test_a_pin_is_checked_against_what_the_endpoint_serves(llama_server):
    # A pin on an endpoint that does not answer /v1/models is refused, naming the variable.
    with pytest.raises(ConfigurationError, match="CTX_LLM_MODEL='pinned-model'"):
        make_fleet(["http://127.0.0.1:9"], model="pinned-model")
    # A pin on a served name: llama.cpp reports no root, so the weights' identity is the name.
    fleet = make_fleet([llama_server], model="smollm2-135m-instruct")
    try:
        assert fleet.model == fleet.weights == "smollm2-135m-instruct"
    finally:
        fleet.close()


def test_two_replicas_share_work_headers_stored_and_failover(llama_servers, tmp_path, settings_factory):
    """Two llama.cpp processes as two replicas: discovery finds the served name, both receive
    requests, headers are stored; then one is killed and its work fails over to the other."""
    from contextual_assets.cli.ingest_runs import (
        collect_sources,
        ingest_partitions,
        register_sources,
    )
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    urls = ",".join(s.base_url for s in llama_servers)
    settings = settings_factory(header_source="auto", llm_base_urls=urls, llm_max_in_flight=1)
    docs = tmp_path / "docs"
    docs.mkdir()
    sentences = [f"Depot {n} receives {n * 7} pallets of frozen peas every Tuesday before {n + 5} am." for n in range(6)]
    (docs / "depots.md").write_text("# Depots\n\n" + "\n\n".join(sentences) + "\n")
    defs = build_definitions(settings.model_copy(update={"chunk_tokens": 24}))
    store = build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    sources, _ = collect_sources([docs], inbox=tmp_path / "inbox", source_root=tmp_path)
    register_sources(store, instance, sources)
    (outcome,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
    assert outcome.success, outcome.error
    metadata = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers")).asset_materialization.metadata
    assert metadata["served_model"].value == "smollm2-135m-instruct"
    shares = metadata["replica_share"].value
    assert set(shares) == {s.base_url for s in llama_servers}, "both replicas received requests"
    version = metadata["index_version"].value
    stored = store.corpus.chunks(version)
    assert len(stored) >= 4 and all(c.header and c.header_source == "openai" for c in stored)

    # Re-run: every header comes from the cache, no LLM call.
    (again,) = ingest_partitions(defs, instance, sources, log_level="ERROR")
    assert again.success
    rerun = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers")).asset_materialization.metadata
    assert rerun["cache_hits"].value == len(stored) and rerun["requests"].value == 0

    # Kill one replica: a new document's requests fail over to the survivor.
    llama_servers[1].stop()
    (docs / "more.md").write_text("# More\n\n" + "\n\n".join(s.replace("peas", "beans") for s in sentences) + "\n")
    sources, _ = collect_sources([docs], inbox=tmp_path / "inbox", source_root=tmp_path)
    register_sources(store, instance, sources)
    outcomes = ingest_partitions(defs, instance, [s for s in sources if s[0].endswith("more.md")], log_level="ERROR")
    assert outcomes[0].success, outcomes[0].error
    after = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers")).asset_materialization.metadata
    assert set(after["replica_share"].value) == {llama_servers[0].base_url}
    llama_servers[1].start().wait_ready()


def test_discovery_errors_name_each_endpoint():
    with pytest.raises(ConfigurationError) as info:
        ModelDiscovery().resolve({"http://127.0.0.1:9/v1": None})
    assert "http://127.0.0.1:9/v1: unreachable" in str(info.value)
    assert "CTX_LLM_MODEL" in str(info.value)


def test_ingest_with_openai_headers_through_dagster(llama_server, tmp_path, settings_factory):
    from contextual_assets.cli.ingest_runs import (
        collect_sources,
        ingest_partitions,
        register_sources,
    )
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    doc = tmp_path / "memo.md"
    doc.write_text("# Travel memo\n\nStaff travelling to Lyon book rail, not flights, for trips under 500 km.\n")
    settings = settings_factory(header_source="auto", llm_base_urls=llama_server)
    sources, _ = collect_sources([doc], inbox=tmp_path / "inbox", source_root=tmp_path)
    store = build_resources(settings)["store"].open()
    instance = dg.DagsterInstance.ephemeral()
    register_sources(store, instance, sources)
    (outcome,) = ingest_partitions(build_definitions(settings), instance, sources, log_level="ERROR")
    assert outcome.success, outcome.error
    event = instance.get_latest_materialization_event(dg.AssetKey("chunk_headers"))
    metadata = event.asset_materialization.metadata
    assert metadata["header_source"].value == "openai"
    assert metadata["header_model"].value == "smollm2-135m-instruct"
    assert metadata["prompt_tokens"].value > 0 and metadata["requests"].value >= 1
    (chunk,) = store.corpus.chunks(metadata["index_version"].value)
    assert chunk.header_source == "openai" and chunk.header


def test_a_chunk_the_model_never_answers_falls_back_to_its_structural_header(tmp_path):
    """A model that fails on one passage (the simulator echoes the prompt for requests holding it): that
    chunk alone gets its structural header, counted and never cached, while at most CTX_LLM_FALLBACK_SHARE of
    the document's chunks do; with none allowed, the document fails naming the chunk."""
    from bench.sim import FleetSimulator
    from contextual_assets.headers.structural import structural_header
    from contextual_assets.store import open_store

    counter = token_counter()
    requests = requests_of(tmp_path / "handbook.md", "# Handbook\n\n" + "\n\n".join(
        f"## Rule {i}\n\nRule {i} says the dock crew checks seal {i} twice and logs it in book {i}."
        for i in range(24)), chunk_tokens=40, context_tokens=200)
    assert len(requests) >= 20
    failing = requests[7].chunk
    store = open_store(None, tmp_path / "index.duckdb")
    with FleetSimulator(1, time_scale=0.01) as sim:
        sim.set_faults(0, malformed="echo", malformed_match=failing.text.split("\n")[-1])
        fleet = make_fleet(sim.base_urls, max_attempts=2)
        try:
            strict = OpenAIHeaderSource(fleet, load_prompt(), counter, header_cache=None)
            with pytest.raises(HeaderGenerationError, match="1 of .* chunks got no valid header"):
                strict.generate(requests)
            source = OpenAIHeaderSource(fleet, load_prompt(), counter, header_cache=store.header_cache,
                                        fallback_share=0.05)
            results, stats = source.stream_with_stats(requests)
            # Cached: every answered header, never the fallback (a later run asks the model for it again).
            _, again = source.stream_with_stats(requests)
        finally:
            fleet.close()
    assert stats.fallbacks == 1 and stats.summary()["fallbacks"] == 1
    assert results[7].source == "structural"
    assert results[7].header == structural_header(failing.title, failing.section_path, failing.text, failing.page_start)
    assert all(r.source == "openai" for i, r in enumerate(results) if i != 7)
    assert stats.cache_hits == 0 and again.cache_hits == len(requests) - 1
    assert again.fallbacks == 1 and again.per_replica == {}  # asked again, failed again, no answer counted


def test_a_prompt_the_server_refuses_as_too_long_is_fitted_again_to_the_limit_it_names(tmp_path):
    """A configured context limit above the server's real one (or a served tokenizer that counts more than
    our estimate): the server's 400 names its limit, and the prompt is fitted once more to it."""
    from bench.sim import FleetSimulator, ReplicaSpec

    counter = token_counter()
    requests = requests_of(tmp_path / "manual.md", "# Manual\n\n## Loading\n\n" + "\n\n".join(
        f"Step {i}: the crew checks pallet {i} against the manifest, seals it and logs seal {i} in the book."
        for i in range(60)), chunk_tokens=60, context_tokens=1000)[:4]
    with FleetSimulator([ReplicaSpec(max_model_len=700)], time_scale=0.01) as sim:
        fleet = make_fleet(sim.base_urls, context_limit=8000)  # configured above the server's 700
        try:
            source = OpenAIHeaderSource(fleet, load_prompt(), counter)
            results, stats = source.stream_with_stats(requests)
        finally:
            fleet.close()
        assert sim.stats()[0]["rejected"] >= 1, "the server refused the first prompts"
    assert stats.refits >= 1 and stats.fallbacks == 0
    assert len(results) == 4 and all(r.source == "openai" for r in results)


def test_a_documents_first_requests_leave_before_its_last_chunk_is_fitted(tmp_path, monkeypatch):
    """Fitting a chunk's prompt tokenizes its context: a long document's first requests are sent after a
    first slice is fitted, so the fleet starts on it while the rest is fitted; every header still lands
    at its chunk's index, the second pass all from the cache."""
    from bench.sim import FleetSimulator
    from contextual_assets.headers import openai_source
    from contextual_assets.store import open_store

    requests = requests_of(tmp_path / "ledger.md", "# Ledger\n\n" + "\n\n".join(
        f"## Entry {i}\n\nEntry {i} moves crate {i} from bay {i % 7} to dock {i % 5} and logs it." for i in range(40)),
        chunk_tokens=30, context_tokens=200)
    assert len(requests) > 2 * openai_source.FIRST_SLICE
    fits, fits_at_first_send = [], []
    real_fit = openai_source.fit_prompts
    monkeypatch.setattr(openai_source, "fit_prompts",
                        lambda batch, *a, **k: fits.extend(batch) or real_fit(batch, *a, **k))
    store = open_store(None, tmp_path / "index.duckdb")
    with FleetSimulator(1, time_scale=0.01) as sim:
        fleet = make_fleet(sim.base_urls)
        real_submit = fleet.submit
        monkeypatch.setattr(fleet, "submit", lambda r: fits_at_first_send.append(len(fits)) or real_submit(r))
        try:
            source = OpenAIHeaderSource(fleet, load_prompt(), token_counter(), header_cache=store.header_cache)
            results, stats = source.stream_with_stats(requests)
            again, cached = source.stream_with_stats(requests)
        finally:
            fleet.close()
    assert fits_at_first_send[0] == openai_source.FIRST_SLICE < len(requests)
    assert [r.header for r in again] == [r.header for r in results] and len(results) == len(requests)
    assert stats.cache_hits == 0 and cached.cache_hits == len(requests) and cached.per_replica == {}


def test_a_slice_that_fails_after_earlier_slices_were_sent_cancels_them(tmp_path, monkeypatch):
    """Sending a slice at a time means requests are out when a later slice fails to fit: they are
    cancelled (the fleet is freed for other documents), and the error reaches the caller."""
    from bench.sim import FleetSimulator
    from contextual_assets.headers import openai_source
    from contextual_assets.headers.budget import ChunkTooLargeError

    requests = requests_of(tmp_path / "ledger.md", "# Ledger\n\n" + "\n\n".join(
        f"## Entry {i}\n\nEntry {i} moves crate {i} from bay {i % 7} to dock {i % 5} and logs it." for i in range(40)),
        chunk_tokens=30, context_tokens=200)
    real_fit, calls, sent = openai_source.fit_prompts, [], []

    def fit_then_fail(batch, *args, **kwargs):
        calls.append(len(batch))
        if len(calls) == 2:
            raise ChunkTooLargeError("chunk 9 is over the model's context")
        return real_fit(batch, *args, **kwargs)

    monkeypatch.setattr(openai_source, "fit_prompts", fit_then_fail)
    with FleetSimulator(1, time_scale=1.0) as sim:  # slow answers: the first slice is still out
        fleet = make_fleet(sim.base_urls)
        real_submit = fleet.submit
        monkeypatch.setattr(fleet, "submit", lambda r: sent.append(real_submit(r)) or sent[-1])
        try:
            source = OpenAIHeaderSource(fleet, load_prompt(), token_counter())
            with pytest.raises(ChunkTooLargeError):
                source.stream_with_stats(requests)
        finally:
            fleet.close()
    assert len(sent) == openai_source.FIRST_SLICE and all(f.cancelled() for f in sent)


def test_prompts_fitted_in_a_batch_are_those_fitted_one_by_one(tmp_path):
    """The batch count (one tokenizer call for a slice) changes nothing: the same messages, estimates and
    trims as `fit_prompt`, including prompts over the limit that lose context parts."""
    from contextual_assets.headers.budget import fit_prompt, fit_prompts

    counter, prompt = token_counter(), load_prompt()
    requests = requests_of(tmp_path / "ops.md", "# Ops\n\n" + "\n\n".join(
        f"## Shift {i}\n\n"
        + " ".join(f"Crew {i} checks valve {j} and logs pressure {i * j}." for j in range(i % 9 + 1))
        for i in range(30)), chunk_tokens=80, context_tokens=600)
    for limit in (None, 900, 420):
        one_by_one = [fit_prompt(r, prompt, counter, context_limit=limit, max_output_tokens=60) for r in requests]
        assert fit_prompts(requests, prompt, counter, context_limit=limit, max_output_tokens=60) == one_by_one
    trimmed = [fit_prompt(r, prompt, counter, context_limit=420, max_output_tokens=60) for r in requests]
    assert any(f.trimmed_parts for f in trimmed) and any(not f.trimmed_parts for f in trimmed), "both paths taken"


def test_request_slices_cover_every_request_once_first_small_then_doubling():
    from contextual_assets.headers.openai_source import request_slices

    assert request_slices(0) == []
    assert request_slices(5, first=8) == [range(0, 5)]
    assert request_slices(40, first=8) == [range(0, 8), range(8, 24), range(24, 40)]
    assert [i for part in request_slices(1000) for i in part] == list(range(1000))


def requests_of(path, text: str, *, chunk_tokens: int, context_tokens: int) -> list:
    """The header requests of a document written to `path`."""
    counter = token_counter()
    path.write_text(text)
    doc = parse_document(path.name, path, counter, chunk_tokens=chunk_tokens, max_bytes=10**6, max_pdf_pages=1)
    return header_requests(doc, counter, context_tokens)
