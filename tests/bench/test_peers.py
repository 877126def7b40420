"""bench.ingest's peers (bench/peers.py): LlamaIndex's IngestionPipeline with DocumentContextExtractor and
the cookbook's thread pool, each with its own prompt and with the platform's, end to end on a tiny
corpus against the fleet simulator (a real OpenAI-compatible server in its own process), the real
MiniLM embedder and a DuckDB store; and the pure parts of the bench's peer rows."""

from __future__ import annotations

import json

import pytest

from bench import ingest, peers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("peers")
    paths = ingest.build_small(root / "corpus", documents=3)
    # A pre-chunked file holding two logical documents: each chunk is situated in its own document.
    prechunked = root / "corpus" / "two_docs.json"
    prechunked.write_text(json.dumps([
        {"doc_id": f"repo/file_{i}.py", "original_uuid": f"u{i}", "content": "",
         "chunks": [{"chunk_id": f"u{i}_{j}", "original_index": j,
                     "content": f"def handler_{i}_{j}(event): return route_{i}(event, retries={j})"} for j in range(3)]}
        for i in range(2)]))
    paths.append(prechunked)
    docs, counter, settings = ingest.corpus_chunks(paths)
    floor = ingest.run_floor(root, 0.1, docs, counter, settings)
    return root, paths, docs, counter, settings, floor


@pytest.mark.parametrize("name", ingest.PEER_MODES)
@pytest.mark.parametrize("prompt", peers.PROMPTS)
def test_each_peer_ingests_the_corpus(corpus, name, prompt):
    root, paths, docs, counter, settings, floor = corpus
    expected = sum(len(d.chunks) for d in docs)
    result = ingest.run_peer(root, 0.1, paths, docs, counter, settings, name, prompt)
    # Every chunk headed by the fleet, embedded and committed (run_peer counts the store's rows).
    assert (result["chunks"], result["headers_missing"], result["requests"]) == (expected, 0, expected)
    assert result["prompt"] == prompt and result["wall_s"] > 0
    assert result["idle_while_pending_s"] is not None
    # Requests spread at random over the replicas, not all to the endpoint the client was given.
    assert sum(1 for share in result["replica_share"] if share > 0) >= 2
    if prompt == "ours":
        # The platform's exact requests: the same prompt tokens as the floor (the platform's own pool).
        assert result["header_tokens_prompt"] == floor["header_tokens_prompt"]
    else:
        # As designed: the whole (logical) document before every chunk.
        whole = sum(len(peers.whole_documents(d)[c.source_doc].split()) for d in docs for c in d.chunks)
        assert result["header_tokens_prompt"] > whole
        if name == "peer_cookbook":
            sent = sum(len(("user " + peers.COOKBOOK_DOCUMENT.format(document=peers.whole_documents(d)[c.source_doc])
                            + " " + peers.COOKBOOK_CHUNK.format(chunk=c.text)).split())
                       for d in docs for c in d.chunks)
            assert result["header_tokens_prompt"] == sent


def test_whole_documents_group_by_logical_document(corpus):
    *_, docs, _, _, _ = corpus
    prechunked = next(d for d in docs if d.kind == "prechunked-json")
    texts = peers.whole_documents(prechunked)
    assert len(texts) == 2
    for source, text in texts.items():
        own = [c.text for c in prechunked.chunks if c.source_doc == source]
        assert text == "\n\n".join(own)


def test_head_within_cuts_at_a_word_boundary_to_the_budget(corpus):
    *_, counter, _, _ = corpus
    text = " ".join(f"word{i} clause" for i in range(400))
    head = peers.head_within(text, 100, counter)
    assert counter.count(head) <= 100 and text.startswith(head) and text[len(head)] == " "
    assert counter.count(" ".join(text.split(" ")[: len(head.split(" ")) + 1])) > 100  # the longest such head
    assert peers.head_within("short text", 100, counter) == "short text"


def test_modes_and_peer_rows():
    assert ingest.peer_runs(["floor", "peer_cookbook", "peer_llamaindex:ours"]) == [
        ("peer_cookbook", "own"), ("peer_cookbook", "ours"), ("peer_llamaindex", "ours")]
    assert ingest.check_modes(["floor", "platform", "legacy", "peer_cookbook:own"]) is None
    assert "peer_cookbok" in ingest.check_modes(["peer_cookbok"])
    assert "peer_cookbook:mine" in ingest.check_modes(["peer_cookbook:mine"])

    def peer(wall, idle):
        return {"wall_s": wall, "header_tokens_prompt": 100, "idle_while_pending_s": idle, "headers_s": 1.0,
                "embed_s": 0.5, "headers_missing": 0}

    rounds = [{"platform": {"wall_s": 10.0}, "peer_cookbook/ours/least_busy": peer(15.0, 1)},
              {"platform": {"wall_s": 20.0}, "peer_cookbook/ours/least_busy": peer(20.0, 3)},
              {"platform": {"wall_s": 10.0}, "peer_cookbook/ours/least_busy": peer(14.0, 2)}]
    (row,) = ingest.peer_rows(rounds)
    assert (row["name"], row["prompt"], row["balancer"], row["rounds"]) == ("peer_cookbook", "ours", "least_busy", 3)
    assert row["ci_low"] <= row["over_platform"] <= row["ci_high"]
    assert row["wall_s"] == 15.0 and row["idle_while_pending_s"] == 2
    assert row["over_platform"] == 1.4  # the median of the per-round ratios 1.5, 1.0, 1.4
    assert row["idle_share"] == pytest.approx(2 / 14, abs=1e-4)


def test_main_writes_the_peer_rows(tmp_path):
    out = tmp_path / "out.json"
    assert ingest.main(["--workload", "small", "--documents", "2", "--modes", "floor,peer_cookbook:ours",
                        "--balancers", "least_busy", "--time-scale", "0.1", "--workdir", str(tmp_path / "work"),
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (row,) = result["peers"]
    assert set(row) >= {"name", "prompt", "balancer", "wall_s", "over_platform", "ci_low", "ci_high",
                        "header_tokens_prompt", "idle_while_pending_s"}
    assert (row["name"], row["prompt"], row["balancer"], row["over_platform"]) == (
        "peer_cookbook", "ours", "least_busy", None)
    (scale,) = result["scales"]
    assert row["header_tokens_prompt"] == scale["rounds"][0]["floor"]["header_tokens_prompt"]
    # The JSON contract of issue 24.
    assert {"workload", "time_scale", "embedder", "wall_over_model_floor", "utilization", "mean_batch_occupancy",
            "idle_while_pending_s", "client_cpu_ms_per_request", "max_num_seqs", "cap_configured",
            "peers"} <= set(result)
    assert result["embedder"] == "remote" and result["cap_configured"] is None
    with pytest.raises(SystemExit):
        ingest.main(["--modes", "floor,peer_nope"])
