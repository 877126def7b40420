"""The vLLM-like fleet simulator (bench/sim/fleet.py): real HTTP over loopback with httpx.

Timing claims are asserted on the simulator's own accounting (simulated busy seconds), with only
loose wall-clock checks, so the tests hold on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from bench.sim import FaultConfig, FleetSimulator, ReplicaSpec
from tests.support import REPO_ROOT


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def chat_body(content: str, **extra) -> dict:
    return {"model": "sim-model", "messages": [{"role": "user", "content": content}], **extra}


def post_chat(client: httpx.Client, url: str, content: str, **extra) -> httpx.Response:
    return client.post(f"{url}/chat/completions", json=chat_body(content, **extra))


async def concurrent_chats(url: str, contents: list[str], **extra) -> list[dict]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
        responses = await asyncio.gather(
            *(client.post(f"{url}/chat/completions", json=chat_body(c, **extra)) for c in contents))
    for r in responses:
        assert r.status_code == 200, r.text
    return [r.json() for r in responses]


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value summed over label sets. Uses prometheus_client's parser when installed
    (it is not in this venv), else a strict regex over every non-comment line."""
    out: dict[str, float] = {}
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        for line in text.splitlines():
            if not line or line.startswith("#"):
                assert re.match(r"^# (HELP|TYPE) \S+ .+$", line) or not line, line
                continue
            m = _SAMPLE.match(line)
            assert m, f"unparsable metrics line: {line!r}"
            out[m["name"]] = out.get(m["name"], 0.0) + float(m["value"])
        return out
    for family in text_string_to_metric_families(text):  # pragma: no cover - not installed here
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def metrics(client: httpx.Client, base_url: str) -> dict[str, float]:
    r = client.get(base_url.removesuffix("/v1") + "/metrics")
    assert r.status_code == 200
    return parse_metrics(r.text)


@pytest.fixture
def client():
    with httpx.Client(timeout=30) as c:
        yield c


# ---------------------------------------------------------------------------------------------


def test_models_usage_determinism_and_context_limit(client):
    specs = [ReplicaSpec(max_model_len=4096), ReplicaSpec(max_model_len=4096, serve_embeddings=True)]
    with FleetSimulator(specs, time_scale=0.05) as fleet:
        assert all(re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", u) for u in fleet.base_urls)
        m0 = client.get(fleet.base_urls[0] + "/models").json()
        assert m0["object"] == "list"
        assert [(d["id"], d["object"], d["owned_by"], d["root"], d["max_model_len"]) for d in m0["data"]] == [
            ("sim-model", "model", "sim", "sim-model", 4096)]
        m1 = client.get(fleet.base_urls[1] + "/models").json()
        assert [d["id"] for d in m1["data"]] == ["sim-model", "sim-embed"]

        # usage: "system a b" (3) + "user <8 words>" (9) = 12 prompt tokens
        chunk = "The quarterly revenue of the northern division rose sharply"
        content = f'<document title="Annual Report">x</document> <chunk>\n{chunk}\n</chunk>'
        body = {"model": "sim-model", "max_tokens": 80,
                "messages": [{"role": "system", "content": "a b"}, {"role": "user", "content": content}]}
        r = client.post(fleet.base_urls[0] + "/chat/completions", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        n_prompt = len(("system a b\nuser " + content).split())
        assert out["usage"]["prompt_tokens"] == n_prompt
        assert out["usage"]["total_tokens"] == n_prompt + out["usage"]["completion_tokens"]
        assert 1 <= out["usage"]["completion_tokens"] <= 8 * 50  # lognormal around 50, capped at 8x
        assert out["model"] == "sim-model" and out["object"] == "chat.completion"
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
        header = choice["message"]["content"]
        assert header.startswith("This passage (ref ") and "quarterly revenue" in header
        assert "Annual Report" in header and header.endswith(".") and len(header.split()) < 40
        # The product's own validator accepts it (one sentence, not a copy of the chunk).
        from contextual_assets.headers.validation import validate_header

        assert validate_header(header, chunk, max_tokens=64, count_tokens=lambda t: len(t.split())) == header

        # Determinism: same prompt, same header, on any replica; another prompt, another ref.
        again = client.post(fleet.base_urls[1] + "/chat/completions", json=body).json()
        assert again["choices"][0]["message"]["content"] == header
        assert again["usage"]["completion_tokens"] == out["usage"]["completion_tokens"]
        other = post_chat(client, fleet.base_urls[0], content + " more").json()
        assert other["choices"][0]["message"]["content"] != header

        # max_tokens caps the output: content cut to that many words, finish_reason "length".
        short = client.post(fleet.base_urls[0] + "/chat/completions", json={**body, "max_tokens": 4}).json()
        assert short["usage"]["completion_tokens"] == 4
        assert short["choices"][0]["finish_reason"] == "length"
        assert len(short["choices"][0]["message"]["content"].split()) == 4

        # Context length: prompt + max_tokens > max_model_len -> 400, OpenAI-style error.
        r = post_chat(client, fleet.base_urls[0], words(4000, "w"), max_tokens=200)
        assert r.status_code == 400
        err = r.json()["error"]
        assert "maximum context length is 4096" in err["message"] and err["code"] == 400
        assert post_chat(client, fleet.base_urls[0], words(4000, "w"), max_tokens=50).status_code == 200
        assert post_chat(client, fleet.base_urls[0], words(5000, "w")).status_code == 400  # no room at all
        # Unknown model -> 404.
        bad = client.post(fleet.base_urls[0] + "/chat/completions", json={**body, "model": "nope"})
        assert bad.status_code == 404 and "does not exist" in bad.json()["error"]["message"]

        # Embeddings: deterministic unit vectors of dimension 32.
        e = client.post(fleet.base_urls[1] + "/embeddings", json={"model": "sim-embed", "input": ["a b", "c"]})
        vecs = [d["embedding"] for d in e.json()["data"]]
        assert len(vecs) == 2 and all(len(v) == 32 for v in vecs)
        assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in vecs)
        e2 = client.post(fleet.base_urls[1] + "/embeddings", json={"input": "a b"}).json()
        assert e2["data"][0]["embedding"] == vecs[0] and vecs[0] != vecs[1]
        assert client.post(fleet.base_urls[0] + "/embeddings", json={"input": "a"}).status_code == 404

        s = fleet.stats()
        assert s[0]["completed"] == 4 and s[0]["rejected"] == 3 and s[1]["completed"] == 1


def test_continuous_batching_and_decode_bound(client):
    with FleetSimulator([ReplicaSpec()], time_scale=0.5) as fleet:
        url = fleet.base_urls[0]
        t0 = time.monotonic()
        assert post_chat(client, url, words(1000, "single")).status_code == 200
        wall_single = time.monotonic() - t0
        busy_single = fleet.stats()[0]["busy_s"]
        # ~0.04 s prefill (compute-bound, 41 us/token) + ~50 x 4.7 ms decode (lognormal length)
        assert 0.05 < busy_single < 1.0

        t0 = time.monotonic()
        asyncio.run(concurrent_chats(url, [words(1000, f"b{k}_") for k in range(16)]))
        wall_batch = time.monotonic() - t0
        s = fleet.stats()[0]
        busy_batch = s["busy_s"] - busy_single
        # 16 requests cost far less than 16 single requests (the decode steps are shared).
        assert busy_batch < 0.6 * 16 * busy_single, (busy_batch, busy_single)
        assert wall_batch < 0.7 * 16 * wall_single, (wall_batch, wall_single)
        # Prefill-bound at 1,000-token prompts on the calibrated A100 (compute-bound prefill, 16 prompts
        # of 1,000 tokens ~0.66 s; the ~50 shared decode steps ~0.25 s).
        assert s["prefill_s"] > s["decode_s"]
        assert s["prefix_hit_tokens"] == 0

    with FleetSimulator([ReplicaSpec()], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]
        asyncio.run(concurrent_chats(url, [words(10000, f"L{k}_") for k in range(16)]))
        s_long = fleet.stats()[0]
        assert s_long["prefix_hit_tokens"] == 0 and s_long["completed"] == 16
        ratio = s_long["busy_s"] / busy_batch
        assert ratio > 1.5, ratio  # expected ~7
        # The engine kept up with wall time (loose: shared CPU).
        assert s_long["busy_wall_s"] < 3 * s_long["busy_s"] * 0.05 + 0.5


def test_prefix_cache_hits_and_misses(client):
    with FleetSimulator([ReplicaSpec(), ReplicaSpec()], time_scale=0.05) as fleet:
        shared = words(800, "doc")
        for tail in ("first question here", "second question there"):
            assert post_chat(client, fleet.base_urls[0], f"{shared} {tail}").status_code == 200
        m = metrics(client, fleet.base_urls[0])
        # The second request re-uses the 50 full blocks of "user doc0 ... doc798" (800 of 801 tokens).
        assert m["vllm:prefix_cache_hits_total"] == 800
        assert m["vllm:prefix_cache_queries_total"] == 2 * 800
        assert m["vllm:prompt_tokens_total"] == 2 * 804

        for k in range(2):
            assert post_chat(client, fleet.base_urls[1], words(800, f"other{k}_")).status_code == 200
        m1 = metrics(client, fleet.base_urls[1])
        assert m1["vllm:prefix_cache_hits_total"] == 0 and m1["vllm:prefix_cache_queries_total"] > 0
        s = fleet.stats()
        assert s[0]["prefix_hit_tokens"] == 800 and s[1]["prefix_hit_tokens"] == 0
        # Hits are cheaper: the second request of replica 0 skipped most of its prefill.
        assert s[0]["prefill_s"] < s[1]["prefill_s"]


def test_speed_factor_scales_accounted_time(client):
    with FleetSimulator([ReplicaSpec(speed=1.0), ReplicaSpec(speed=0.775)], time_scale=0.05) as fleet:
        async def serial(url: str) -> None:
            async with httpx.AsyncClient(timeout=30) as c:
                for k in range(4):
                    r = await c.post(f"{url}/chat/completions", json=chat_body(words(600, f"s{k}_")))
                    assert r.status_code == 200

        async def both():
            await asyncio.gather(serial(fleet.base_urls[0]), serial(fleet.base_urls[1]))

        asyncio.run(both())
        fast, slow = fleet.stats()
        assert fast["completed"] == slow["completed"] == 4
        assert fast["generation_tokens"] == slow["generation_tokens"]
        assert slow["busy_s"] / fast["busy_s"] == pytest.approx(1 / 0.775, rel=1e-6)


def test_metrics_move_while_busy_and_parse(client):
    with FleetSimulator([ReplicaSpec()], time_scale=1.0) as fleet:
        url = fleet.base_urls[0]

        async def scenario():
            async with httpx.AsyncClient(timeout=30) as c:
                tasks = [asyncio.ensure_future(c.post(f"{url}/chat/completions",
                                                      json=chat_body(words(300, f"m{k}_"), max_tokens=60)))
                         for k in range(4)]
                # Sampled once all four are admitted and decoding has begun: polled rather than after a
                # fixed sleep, which a loaded machine overruns either way (none admitted yet, or
                # admitted with no decode step taken). A fleet whose metrics never move fails below.
                deadline = time.monotonic() + 10
                while True:
                    text = (await c.get(url.removesuffix("/v1") + "/metrics")).text
                    sample = parse_metrics(text)
                    busy = sample["vllm:num_requests_running"] == 4 and sample["vllm:generation_tokens_total"] > 0
                    if busy or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.gather(*tasks)
                return text, (await c.get(url.removesuffix("/v1") + "/metrics")).text

        during, after = asyncio.run(scenario())
        for name, kind in [("vllm:prompt_tokens_total", "counter"), ("vllm:generation_tokens_total", "counter"),
                           ("vllm:prefix_cache_hits_total", "counter"), ("vllm:prefix_cache_queries_total", "counter"),
                           ("vllm:request_success_total", "counter"), ("vllm:num_requests_running", "gauge"),
                           ("vllm:num_requests_waiting", "gauge")]:
            assert f"# TYPE {name} {kind}" in after
            assert re.search(rf'^{re.escape(name)}\{{model_name="sim-model"', after, re.M), name
        m = parse_metrics(during)
        assert m["vllm:num_requests_running"] == 4
        assert m["vllm:prompt_tokens_total"] == 4 * 301  # counted at prefill, before completion
        assert 0 < m["vllm:generation_tokens_total"] < 4 * 60
        assert m["vllm:request_success_total"] == 0
        m = parse_metrics(after)
        assert m["vllm:request_success_total"] == 4 and m["vllm:num_requests_running"] == 0


def test_faults_errors_stalls_disconnects(client):
    with FleetSimulator([ReplicaSpec(), ReplicaSpec()], time_scale=1.0, seed=7) as fleet:
        url = fleet.base_urls[0]
        fleet.set_faults(0, error_rate=1.0)
        r = post_chat(client, url, "hello there")
        assert r.status_code == 500 and r.json()["error"]["type"] == "InternalServerError"
        # The admin endpoint sets faults too (partial update, JSON).
        admin = url.removesuffix("/v1") + "/admin/faults"
        assert client.post(admin, json={"error_rate": 0.0}).json()["error_rate"] == 0.0
        assert post_chat(client, url, "hello there").status_code == 200
        assert client.post(admin, json={"malformed": "nonsense"}).status_code == 400
        assert client.post(admin, json={"no_such_fault": 1}).status_code == 400

        # Deterministic given a seed: the same sequence of outcomes twice.
        def outcomes():
            fleet.set_faults(1, error_rate=0.5, seed=123)
            return [post_chat(client, fleet.base_urls[1], f"q{k}", max_tokens=2).status_code for k in range(12)]

        first = outcomes()
        assert first == outcomes() and {200, 500} == set(first)
        fleet.set_faults(1, error_rate=0.0)

        # Stall: the request hangs stall_s (wall seconds) before it is processed.
        fleet.set_faults(0, stall_s=0.4)
        t0 = time.monotonic()
        assert post_chat(client, url, "slow one", max_tokens=2).status_code == 200
        assert time.monotonic() - t0 >= 0.4
        fleet.set_faults(0, stall_s=0.0)

        # A client that gives up is aborted in the engine (as vLLM does).
        with pytest.raises(httpx.TimeoutException), httpx.Client(timeout=0.1) as impatient:
            post_chat(impatient, url, words(200, "t"), max_tokens=1000)
        deadline = time.monotonic() + 3
        # The abort and the engine's release of the sequence are two steps: wait for both.
        while (fleet.stats()[0]["aborted"] < 1 or fleet.stats()[0]["running"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        s = fleet.stats()[0]
        assert s["aborted"] == 1 and s["running"] == 0
        assert s["errors_injected"] == 1 and s["stalls_injected"] == 1


def test_kill_restart_and_scheduled_outage(client):
    # Replica 1 writes ~500-token answers (~3 s), so a request is surely in flight at the kill.
    with FleetSimulator([ReplicaSpec(), ReplicaSpec(output_tokens_mean=500)], time_scale=1.0) as fleet:
        url = fleet.base_urls[1]
        port = fleet.stats()[1]["port"]

        async def in_flight_then_kill():
            async with httpx.AsyncClient(timeout=30) as c:
                task = asyncio.ensure_future(
                    c.post(f"{url}/chat/completions", json=chat_body(words(50, "k"), max_tokens=500)))
                await asyncio.sleep(0.2)
                await asyncio.to_thread(fleet.kill, 1)
                return await asyncio.gather(task, return_exceptions=True)

        (result,) = asyncio.run(in_flight_then_kill())
        assert isinstance(result, (httpx.RemoteProtocolError, httpx.ReadError)) or result.status_code == 503, result
        with pytest.raises(httpx.ConnectError):
            client.get(url + "/models")
        assert post_chat(client, fleet.base_urls[0], "still here").status_code == 200
        s = fleet.stats()[1]
        assert s["alive"] is False and s["dropped"] == 1 and s["kills"] == 1

        fleet.restart(1)
        assert fleet.base_urls[1] == url and fleet.stats()[1]["port"] == port
        r = post_chat(client, url, "back again", max_tokens=20)
        assert r.status_code == 200
        # /metrics restarts from zero like a new process; stats() stays cumulative.
        m = metrics(client, url)
        assert m["vllm:request_success_total"] == 1

        # Scheduled outage, relative to fleet start (wall seconds).
        now = fleet.elapsed()
        fleet.set_faults(0, kill_at_s=now + 0.3, restart_at_s=now + 0.9)
        assert client.get(fleet.base_urls[0] + "/models").status_code == 200
        time.sleep(0.6)
        with pytest.raises(httpx.ConnectError):
            client.get(fleet.base_urls[0] + "/models")
        time.sleep(0.6)
        assert client.get(fleet.base_urls[0] + "/models").status_code == 200
        assert fleet.stats()[0]["kills"] == 1 and fleet.stats()[0]["restarts"] == 1


def test_malformed_modes_and_batch_json(client):
    chunks = "".join(f'<chunk id="c{i}">Section {i} explains topic number {i} in detail</chunk>\n'
                     for i in range(3))
    batch_prompt = f"Write a header for each chunk.\n{chunks}Answer as JSON."
    with FleetSimulator([ReplicaSpec()], time_scale=0.02) as fleet:
        url = fleet.base_urls[0]

        def content(prompt: str, **extra) -> tuple[str, dict]:
            out = post_chat(client, url, prompt, **extra).json()
            return out["choices"][0]["message"]["content"], out

        # Batch mode through the marker and through response_format.
        text, out = content(batch_prompt)
        headers = json.loads(text)["headers"]
        assert [h["id"] for h in headers] == ["c0", "c1", "c2"]
        assert all(h["header"].startswith("This passage") for h in headers)
        assert out["usage"]["completion_tokens"] >= len(text.split(" "))  # never below the answer's words
        text2, _ = content(chunks, response_format={"type": "json_object"})
        assert [h["id"] for h in json.loads(text2)["headers"]] == ["c0", "c1", "c2"]
        # A batch cut by max_tokens is invalid JSON with finish_reason "length".
        cut, out = content(batch_prompt, max_tokens=10)
        assert out["choices"][0]["finish_reason"] == "length"
        with pytest.raises(json.JSONDecodeError):
            json.loads(cut)

        single = "<chunk>\nThe pump must be primed before the first start\n</chunk>"
        fleet.set_faults(0, malformed="empty")
        assert content(single)[0] == ""
        fleet.set_faults(0, malformed="overlong")
        text, out = content(single, max_tokens=80)
        assert len(text.split()) == 80 and out["choices"][0]["finish_reason"] == "length"
        assert not re.search(r"[.!?]", text)
        fleet.set_faults(0, malformed="echo")
        assert content(single)[0] == single
        fleet.set_faults(0, malformed="copy")
        assert content(single)[0] == "The pump must be primed before the first start"
        fleet.set_faults(0, malformed="bad_json")
        with pytest.raises(json.JSONDecodeError):
            json.loads(content(batch_prompt)[0])
        # malformed_rate < 1: a mix, deterministic for a seed.
        fleet.set_faults(0, malformed="empty", malformed_rate=0.5, seed=1)
        got = [content(single)[0] == "" for _ in range(12)]
        assert any(got) and not all(got)
        fleet.set_faults(0, malformed=None)
        assert content(single)[0].startswith("This passage")
        assert fleet.stats()[0]["malformed_injected"] == 5 + sum(got)


def test_standalone_process_writes_port_file(tmp_path, client):
    port_file = tmp_path / "fleet.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sim", "--replicas", "2", "--speeds", "1,0.775",
         "--time-scale", "0.05", "--port-file", str(port_file), "--faults", '{"1": {"error_rate": 1.0}}'],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no port file"
            time.sleep(0.05)
        info = json.loads(port_file.read_text())
        assert len(info["base_urls"]) == 2 and info["pid"] == proc.pid
        assert post_chat(client, info["base_urls"][0], "hello").status_code == 200
        assert post_chat(client, info["base_urls"][1], "hello").status_code == 500
        stats = client.get(info["admin_urls"][1] + "/stats").json()
        assert stats["speed"] == 0.775 and stats["errors_injected"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
    assert rc == 0
    assert not os.path.exists(f"{port_file}.tmp{proc.pid}")


def test_models_report_root_and_parent_and_admin_swaps_the_weights(client):
    from contextual_assets.fleet.discovery import fetch_models

    specs = [ReplicaSpec(root="org/weights-v1"), ReplicaSpec(root="/adapters/legal", parent="org/base")]
    with FleetSimulator(specs, time_scale=0.05) as fleet:
        entry = client.get(fleet.base_urls[0] + "/models").json()["data"][0]
        assert (entry["id"], entry["root"], entry["parent"]) == ("sim-model", "org/weights-v1", None)
        # The product's reader sees name, weights and context length as vLLM reports them.
        (served,) = fetch_models(fleet.base_urls[0], None)
        assert (served.id, served.root, served.parent, served.max_model_len) == (
            "sim-model", "org/weights-v1", None, 32768)
        (adapter,) = fetch_models(fleet.base_urls[1], None)
        assert adapter.weights == "org/base+/adapters/legal"

        # POST /admin/model: the same name now serves other weights; requests by name still work.
        admin = fleet.base_urls[0].removesuffix("/v1") + "/admin/model"
        new = client.post(admin, json={"root": "org/weights-v2"}).json()
        assert (new["id"], new["root"], new["parent"]) == ("sim-model", "org/weights-v2", None)
        assert client.get(admin).json() == new
        assert client.get(fleet.base_urls[0] + "/models").json()["data"][0]["root"] == "org/weights-v2"
        assert post_chat(client, fleet.base_urls[0], "still served by name").status_code == 200
        assert client.post(admin, json={"root": 3}).status_code == 400
        assert client.post(admin, json={"weights": "x"}).status_code == 400
        assert client.get(admin).json()["root"] == "org/weights-v2", "a rejected change changes nothing"
        # In process: parent and root; null resets root to the served name.
        assert fleet.set_model(1, parent=None, root=None)["root"] == "sim-model"
        assert fetch_models(fleet.base_urls[1], None)[0].weights == "sim-model"


def test_sim_process_root_flag_and_set_model(tmp_path):
    from bench.sim import SimFleet

    sim = SimFleet.start(tmp_path, time_scale=0.05, speeds=(1.0,), root="org/weights-v1")
    try:
        with httpx.Client(timeout=10) as c:
            assert c.get(sim.base_urls[0] + "/models").json()["data"][0]["root"] == "org/weights-v1"
            assert sim.set_model(0, "org/weights-v2")["root"] == "org/weights-v2"
            assert c.get(sim.base_urls[0] + "/models").json()["data"][0]["root"] == "org/weights-v2"
    finally:
        sim.stop()


# --------------------------------------------------------------------------------------------- scoring

# The query's content words: diff, executor, retry, policy, patch, timeout ("for", "a": left out).
RERANK_QUERY = "DiffExecutor retry policy for a patch timeout"
RERANK_DOCS = [
    "The scheduler retries failed jobs with exponential backoff.",         # 0: none ("retries" != "retry")
    "DiffExecutor applies a patch and logs it.",                            # 1: diff, executor, patch: half
    ("The diff_executor retry policy: each failed patch is retried with backoff "
     "after a timeout, and the DiffExecutor logs every attempt in detail."),  # 2: all six, long
    "diff executor retry policy timeout patch",                             # 3: all six, short
]


def rerank_body(**extra) -> dict:
    return {"model": "sim-model", "query": RERANK_QUERY, "documents": RERANK_DOCS, **extra}


def test_relevance_proxy_is_word_coverage_with_a_brevity_tie_breaker():
    from bench.sim.fleet import content_words, relevance

    # camelCase and underscores split; one-letter words and stopwords dropped; lowercased.
    assert content_words("How does the DiffExecutor use diff_tool, HTTPServer and a v2Config?") == {
        "diff", "executor", "use", "tool", "http", "server", "v2", "config"}
    query = "DiffExecutor retry policy timeout"  # diff, executor, retry, policy, timeout
    full_long = "the diff executor has a retry policy and a timeout " + words(200, "filler")
    half = "diff executor retry"
    assert relevance(query, full_long) > relevance(query, half) > relevance(query, "unrelated text")
    # Equal coverage: the shorter document wins; no randomness; always within [0, 1].
    assert relevance(query, "retry policy") > relevance(query, "retry policy " + words(30, "x"))
    assert relevance(query, half) == relevance(query, half)
    assert all(0.0 <= relevance(query, d) <= 1.0 for d in (full_long, half, "", query))
    assert relevance(query, "") < 0.05 and relevance(query, query) > 0.99


def test_rerank_orders_by_relevance_honours_top_n_and_counts_cost(client):
    from bench.sim.fleet import relevance

    with FleetSimulator([ReplicaSpec(speed=0.5)], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]
        r = client.post(f"{url}/rerank", json=rerank_body())
        assert r.status_code == 200, r.text
        out = r.json()
        assert set(out) == {"id", "model", "usage", "results"}
        assert re.fullmatch(r"rerank-[0-9a-f]{32}", out["id"]) and out["model"] == "sim-model"
        n_tokens = sum(len(RERANK_QUERY.split()) + len(d.split()) for d in RERANK_DOCS)  # the query once per pair
        assert out["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
        results = out["results"]
        assert all(set(x) == {"index", "document", "relevance_score"} for x in results)
        assert [x["index"] for x in results] == [3, 2, 1, 0]
        assert all(x["document"] == {"text": RERANK_DOCS[x["index"]]} for x in results)
        assert [x["relevance_score"] for x in results] == [relevance(RERANK_QUERY, RERANK_DOCS[x["index"]])
                                                           for x in results]

        # top_n keeps the best n; 0 means all (vLLM's default); /rerank without /v1 is the same handler.
        top = client.post(url.removesuffix("/v1") + "/rerank", json=rerank_body(top_n=2)).json()
        assert [x["index"] for x in top["results"]] == [3, 2]
        assert top["results"] == results[:2] and top["usage"] == out["usage"]
        assert len(client.post(f"{url}/rerank", json=rerank_body(top_n=0)).json()["results"]) == 4
        assert len(client.post(f"{url}/rerank", json=rerank_body(top_n=99)).json()["results"]) == 4
        # Equal scores keep the documents' order.
        same = client.post(f"{url}/rerank", json=rerank_body(documents=["same text", "same text"])).json()
        assert [x["index"] for x in same["results"]] == [0, 1]

        s = fleet.stats()[0]
        assert s["rerank_requests"] == 5 and s["completed"] == 0 and s["busy_s"] == 0
        total = 4 * n_tokens + 2 * (len(RERANK_QUERY.split()) + 2)
        assert s["prompt_tokens"] == total
        assert s["scoring_s"] == pytest.approx(2e-5 * total / 0.5)  # prefill cost only, at speed 0.5
        assert metrics(client, url)["vllm:prompt_tokens_total"] == total


def test_score_one_to_n_and_n_to_n(client):
    from bench.sim.fleet import relevance

    with FleetSimulator([ReplicaSpec()], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]
        r = client.post(f"{url}/score", json={"model": "sim-model", "text_1": RERANK_QUERY, "text_2": RERANK_DOCS})
        assert r.status_code == 200, r.text
        out = r.json()
        assert set(out) == {"id", "object", "created", "model", "data", "usage"}
        assert re.fullmatch(r"score-[0-9a-f]{32}", out["id"])
        assert (out["object"], out["model"]) == ("list", "sim-model")
        n_tokens = sum(len(RERANK_QUERY.split()) + len(d.split()) for d in RERANK_DOCS)
        assert out["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens, "completion_tokens": 0}
        # 1:N: one score per document, in input order (not sorted), the same numbers rerank gives.
        assert [set(d) for d in out["data"]] == [{"index", "object", "score"}] * 4
        assert [(d["index"], d["object"]) for d in out["data"]] == [(i, "score") for i in range(4)]
        assert [d["score"] for d in out["data"]] == [relevance(RERANK_QUERY, d) for d in RERANK_DOCS]

        # N:N pairwise; a one-item list is broadcast like a string (as vLLM does); /score works too.
        pairs = {"text_1": ["retry policy", "patch timeout"], "text_2": ["the retry policy", "a cat"]}
        nn = client.post(url.removesuffix("/v1") + "/score", json={"model": "sim-model", **pairs}).json()
        assert [d["score"] for d in nn["data"]] == [relevance("retry policy", "the retry policy"),
                                                    relevance("patch timeout", "a cat")]
        one = client.post(f"{url}/score", json={"text_1": ["retry"], "text_2": ["retry", "x", "y"]}).json()
        assert len(one["data"]) == 3 and one["data"][0]["score"] > one["data"][1]["score"]
        single = client.post(f"{url}/score", json={"text_1": "retry", "text_2": "retry"}).json()
        assert len(single["data"]) == 1
        assert fleet.stats()[0]["score_requests"] == 4

        # Unequal N:M (and N:1) is a 400.
        for body in ({"text_1": ["a b", "c d"], "text_2": ["x", "y", "z"]}, {"text_1": ["a b", "c d"], "text_2": "x"}):
            bad = client.post(f"{url}/score", json=body)
            assert bad.status_code == 400 and "1:N or N:N" in bad.json()["error"]["message"]


def test_scoring_bad_requests_and_unknown_model(client):
    with FleetSimulator([ReplicaSpec(max_model_len=64)], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]
        cases = [
            ("rerank", {"documents": ["a"]}, "query"),
            ("rerank", {"query": "  ", "documents": ["a"]}, "query"),
            ("rerank", {"query": "q", "documents": "not a list"}, "documents"),
            ("rerank", {"query": "q", "documents": ["a", 3]}, "documents"),
            ("rerank", {"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
            ("rerank", {"query": "q", "documents": ["a", words(80, "w")]}, "maximum context length is 64"),
            ("score", {"text_2": ["a"]}, "text_1"),
            ("score", {"text_1": "q", "text_2": []}, "text_2"),
            ("score", {"text_1": "q", "text_2": [None]}, "text_2"),
        ]
        for path, body, needle in cases:
            r = client.post(f"{url}/{path}", json={"model": "sim-model", **body})
            assert r.status_code == 400, (path, body, r.text)
            err = r.json()["error"]
            assert needle in err["message"] and err["type"] == "BadRequestError" and err["code"] == 400, err
        r = client.post(f"{url}/rerank", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        for path, body in (("rerank", rerank_body(model="nope")), ("score", {"model": "nope", "text_1": "a",
                                                                              "text_2": "b"})):
            r = client.post(f"{url}/{path}", json=body)
            assert r.status_code == 404 and "`nope` does not exist" in r.json()["error"]["message"]
        # No model name means the served one; an empty document list ranks nothing.
        ok = client.post(f"{url}/rerank", json={"query": "q", "documents": []})
        assert ok.status_code == 200 and ok.json()["results"] == []
        s = fleet.stats()[0]
        assert s["rejected"] == len(cases) + 2 and s["rerank_requests"] == 1 and s["score_requests"] == 0


def test_scoring_faults_and_service_time(client):
    with FleetSimulator([ReplicaSpec()], time_scale=1.0, seed=3) as fleet:
        url = fleet.base_urls[0]
        fleet.set_faults(0, error_rate=1.0)
        for path, body in (("rerank", rerank_body()), ("score", {"text_1": "a", "text_2": ["b"]})):
            r = client.post(f"{url}/{path}", json=body)
            assert r.status_code == 500 and r.json()["error"]["type"] == "InternalServerError"
        fleet.set_faults(0, error_rate=0.0, stall_s=0.3)
        t0 = time.monotonic()
        assert client.post(f"{url}/rerank", json=rerank_body()).status_code == 200
        assert time.monotonic() - t0 >= 0.3
        fleet.set_faults(0, stall_s=0.0)
        s = fleet.stats()[0]
        assert s["errors_injected"] == 2 and s["stalls_injected"] == 1 and s["rerank_requests"] == 1

        # Service time: 10 pairs x (2 + 998) = 10,000 prompt tokens x 2e-5 s = 0.2 s; two requests at once
        # queue in the scoring lane (lower bounds only: a loaded machine is only ever slower).
        big = {"query": "retry policy", "documents": [words(998, f"d{k}_") for k in range(10)]}
        t0 = time.monotonic()
        assert client.post(f"{url}/rerank", json=big).status_code == 200
        assert time.monotonic() - t0 >= 0.19

        async def two():
            async with httpx.AsyncClient(timeout=30) as c:
                return await asyncio.gather(*(c.post(f"{url}/rerank", json=big) for _ in range(2)))

        t0 = time.monotonic()
        assert [r.status_code for r in asyncio.run(two())] == [200, 200]
        assert time.monotonic() - t0 >= 0.38
        # Injected errors cost nothing; the stalled request and the three big ones their prefill.
        small = sum(len(RERANK_QUERY.split()) + len(d.split()) for d in RERANK_DOCS)
        assert fleet.stats()[0]["scoring_s"] == pytest.approx(2e-5 * (small + 3 * 10_000))


def wait_for(predicate, timeout: float = 10.0, what: str = "a condition") -> None:
    """Poll `predicate` (a loaded machine is slow, never faster): fail after `timeout` wall seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_slowdown_fault_multiplies_engine_costs_and_applies_mid_request(client):
    with pytest.raises(ValueError, match="slowdown"):
        FaultConfig(slowdown=0.5).validate()
    with pytest.raises(ValueError, match="slowdown"):
        ReplicaSpec(faults={"slowdown": float("nan")})
    specs = [ReplicaSpec(output_tokens_mean=200), ReplicaSpec(output_tokens_mean=200)]
    with FleetSimulator(specs, time_scale=0.05) as fleet:
        admin = fleet.base_urls[1].removesuffix("/v1") + "/admin/faults"
        assert client.post(admin, json={"slowdown": 0.9}).status_code == 400
        with pytest.raises(ValueError, match="slowdown"):
            fleet.set_faults(1, slowdown=0.0)
        assert client.post(admin, json={"slowdown": 3}).json()["slowdown"] == 3
        fleet.set_faults(0, error_rate=0.0)  # replica 0 stays healthy (slowdown 1.0 by default)
        assert fleet.get_faults(0)["slowdown"] == 1.0
        for url in fleet.base_urls:
            for k in range(2):
                assert post_chat(client, url, words(400, f"w{k}_"), max_tokens=40).status_code == 200
        healthy, slow = fleet.stats()
        assert healthy["generation_tokens"] == slow["generation_tokens"] and healthy["steps"] == slow["steps"]
        for key in ("busy_s", "prefill_s", "decode_s"):
            assert slow[key] == pytest.approx(3 * healthy[key], rel=1e-9), key
        # Scoring costs are engine costs too.
        fleet.set_faults(0, slowdown=1.0)
        for url in fleet.base_urls:
            assert client.post(f"{url}/score", json={"text_1": "a b", "text_2": ["c d e"]}).status_code == 200
        healthy, slow = fleet.stats()
        assert slow["scoring_s"] == pytest.approx(3 * healthy["scoring_s"])

    # Set while a request decodes: the steps after it cost 4x, those before 1x. (Natural answers of
    # ~1,000 tokens, cut at max_tokens: both requests decode exactly 200 steps.)
    with FleetSimulator([ReplicaSpec(output_tokens_mean=1000)], time_scale=0.5) as fleet:
        url = fleet.base_urls[0]
        assert post_chat(client, url, words(50, "base"), max_tokens=200).status_code == 200
        base = fleet.stats()[0]["busy_s"]

        async def slowed_midway():
            async with httpx.AsyncClient(timeout=60) as c:
                task = asyncio.ensure_future(c.post(f"{url}/chat/completions",
                                                    json=chat_body(words(50, "mid"), max_tokens=200)))
                await asyncio.to_thread(wait_for, lambda: fleet.stats()[0]["generation_tokens"] >= 200 + 40,
                                        10, "40 decode steps")
                fleet.set_faults(0, slowdown=4.0)
                return await task

        assert asyncio.run(slowed_midway()).status_code == 200
        s = fleet.stats()[0]
        assert s["generation_tokens"] == 400
        second = s["busy_s"] - base
        # 40 to 160 of the 200 steps (the poll can lag) at 4x: strictly between 1x and 4x the healthy cost.
        assert 1.5 * base < second < 3.9 * base, (second, base)


def test_kv_cache_usage_gauge_under_both_names(client):
    with pytest.raises(ValueError, match="kv_cache_tokens"):
        ReplicaSpec(kv_cache_tokens=-1)
    # The legacy gauge (a share of max_num_seqs * 2,048 tokens that bounds nothing); the vllm gauge is
    # tested in test_sim_engine.py.
    specs = [ReplicaSpec(max_num_seqs=4, cost_model="legacy"), ReplicaSpec(kv_cache_tokens=100, cost_model="legacy")]
    with FleetSimulator(specs, time_scale=1.0) as fleet:
        url = fleet.base_urls[0]
        idle = metrics(client, url)
        assert idle["vllm:kv_cache_usage_perc"] == idle["vllm:gpu_cache_usage_perc"] == 0.0

        async def sample_while_decoding(base_url: str, n: int) -> dict[str, float]:
            async with httpx.AsyncClient(timeout=30) as c:
                tasks = [asyncio.ensure_future(c.post(f"{base_url}/chat/completions",
                                                      json=chat_body(words(300, f"kv{k}_"), max_tokens=60)))
                         for k in range(n)]
                deadline = time.monotonic() + 10
                while True:
                    sample = parse_metrics((await c.get(base_url.removesuffix("/v1") + "/metrics")).text)
                    if sample["vllm:num_requests_running"] == n and sample["vllm:generation_tokens_total"] > 0:
                        break
                    assert time.monotonic() < deadline, "never saw the batch decoding"
                    await asyncio.sleep(0.01)
                for r in await asyncio.gather(*tasks):
                    assert r.status_code == 200
                return sample

        during = asyncio.run(sample_while_decoding(url, 2))
        # Two sequences of 301 prompt tokens plus up to 60 generated, over 4 x 2,048 tokens.
        assert 2 * 301 / 8192 < during["vllm:kv_cache_usage_perc"] <= 2 * 361 / 8192
        assert during["vllm:gpu_cache_usage_perc"] == during["vllm:kv_cache_usage_perc"]
        text = client.get(url.removesuffix("/v1") + "/metrics").text
        for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            assert f"# TYPE {name} gauge" in text
            assert re.search(rf'^{re.escape(name)}\{{model_name="sim-model"\}} 0\.0$', text, re.M), name
        assert fleet.stats()[0]["kv_cache_usage"] == 0.0

        # A cache smaller than one prompt: capped at 1.
        full = asyncio.run(sample_while_decoding(fleet.base_urls[1], 1))
        assert full["vllm:kv_cache_usage_perc"] == full["vllm:gpu_cache_usage_perc"] == 1.0


def test_open_and_peak_open_requests_count_stalled_and_disconnected(client):
    with FleetSimulator([ReplicaSpec(), ReplicaSpec()], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]
        s = fleet.stats()[0]
        assert s["open_requests"] == 0 and s["peak_open_requests"] == 0
        assert client.post(f"{url}/chat/completions", content=b"not json").status_code == 400
        assert fleet.stats()[0]["peak_open_requests"] == 0  # no parsed body, never inside the handler

        fleet.set_faults(0, stall_s=0.5)

        async def three_stalled():
            async with httpx.AsyncClient(timeout=30) as c:
                tasks = [asyncio.ensure_future(c.post(f"{url}/chat/completions",
                                                      json=chat_body(f"open {k}", max_tokens=4)))
                         for k in range(3)]
                await asyncio.to_thread(wait_for, lambda: fleet.stats()[0]["open_requests"] == 3, 10,
                                        "three open requests")
                return await asyncio.gather(*tasks)

        assert [r.status_code for r in asyncio.run(three_stalled())] == [200] * 3
        s = fleet.stats()[0]
        assert s["open_requests"] == 0 and s["peak_open_requests"] == 3 and s["stalls_injected"] == 3

        # A client that gives up on a stalled request closes it at once, counted as aborted.
        fleet.set_faults(0, stall_s=3600)
        with pytest.raises(httpx.TimeoutException), httpx.Client(timeout=0.2) as impatient:
            post_chat(impatient, url, "never answered", max_tokens=4)
        wait_for(lambda: fleet.stats()[0]["open_requests"] == 0, 5, "the stalled request to close")
        assert fleet.stats()[0]["aborted"] == 1

        # A kill drops what is open (not an abort); the peak survives the kill and the restart.
        async def open_then_kill():
            async with httpx.AsyncClient(timeout=30) as c:
                task = asyncio.ensure_future(c.post(f"{url}/chat/completions", json=chat_body("stuck")))
                await asyncio.to_thread(wait_for, lambda: fleet.stats()[0]["open_requests"] == 1, 10,
                                        "an open request")
                await asyncio.to_thread(fleet.kill, 0)
                return await asyncio.gather(task, return_exceptions=True)

        asyncio.run(open_then_kill())
        fleet.restart(0)
        fleet.set_faults(0, stall_s=0.0)
        assert post_chat(client, url, "after restart", max_tokens=4).status_code == 200
        s = fleet.stats()[0]
        assert s["open_requests"] == 0 and s["peak_open_requests"] == 3 and s["aborted"] == 1
        assert fleet.stats()[1]["peak_open_requests"] == 0
