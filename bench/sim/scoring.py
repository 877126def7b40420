"""Embeddings, rerank and score endpoints of a simulated replica (bench/sim/fleet.py), each served
in a lane of its own beside the chat engines.

Scoring (/rerank, /score) is prefill only: a request of P prompt tokens (each (query, document) pair
is one sequence, so the query counts once per document) costs ``prefill_s_per_token * P / speed``
(2e-5 s a token),
served one request after another in a lane of its own beside the chat engines (vLLM serves a
reranker as a separate pooling model; its batches are compute-bound, so serial time is about
batched time; the ``slowdown`` fault applies too). No prefix cache, no decode. The tokens count in ``prompt_tokens`` /
``vllm:prompt_tokens`` (engine 0); ``stats()`` has ``rerank_requests``, ``score_requests`` and ``scoring_s``
(simulated seconds, not part of ``busy_s``). Faults: errors and stalls as for chat, no malformed
answers; a pair over ``max_model_len`` is a 400.

Embeddings (/v1/embeddings, when ``serve_embeddings``; model ``sim-embed``, unit vectors of
``embedding_dim``, deterministic per input text) are served in an embedding lane of their own, like
scoring: one request (a batch of inputs) at a time, costing ``embed_base_s + embed_s_per_token *
input tokens`` (1 ms + 3.5 us a token: a small GPU encoder, all-MiniLM-L6-v2 at ~14,200 sentences/s on
a V100; ``stats()["embedding_s"]``, ``embedding_requests``, ``embeddings`` (inputs)). Faults: errors and
stalls.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.sim.http_app import _error
from bench.sim.text import (
    _is_str_list,
    embedding_vector,
    relevance,
)


class ReplicaScoring:
    """Mixin of ``Replica``: /v1/embeddings, /rerank and /score."""

    async def _embeddings(self, request):
        from starlette.responses import JSONResponse

        if not self.spec.serve_embeddings:
            return _error(404, "this replica serves no embedding model", "NotFoundError")
        body, err = await self._read_json(request)
        if err is not None:
            return err
        model = body.get("model") or self.spec.embedding_model
        if model != self.spec.embedding_model:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            return _error(400, "input must be a string or a list of strings", "BadRequestError")
        fault = await self._pre_faults()
        if fault is not None:
            return fault
        n_tokens = sum(len(x.split()) for x in inputs)
        err = await self._embedding_time(n_tokens)
        if err is not None:
            return err
        self.acct["embeddings"] += len(inputs)
        self.acct["embedding_requests"] += 1
        return JSONResponse({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": embedding_vector(x, self.spec.embedding_dim)}
                     for i, x in enumerate(inputs)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        })

    # ---- scoring (cross-encoder endpoints)

    async def _scoring_body(self, request):
        """(JSON body, None), or (None, the error answer) for a bad body or another model's name."""
        body, err = await self._read_json(request)
        if err is None:
            err = self._model_error(body)
        return (None, err) if err is not None else (body, None)

    async def _rerank(self, request):
        """POST /v1/rerank and /rerank: documents by relevance to the query, best first, top_n of them."""
        from starlette.responses import JSONResponse

        body, err = await self._scoring_body(request)
        if err is not None:
            return err
        query, documents, top_n = body.get("query"), body.get("documents"), body.get("top_n")
        if not isinstance(query, str) or not query.strip():
            return self._bad_request("query must be a non-empty string")
        if not _is_str_list(documents):
            return self._bad_request("documents must be a list of strings")
        if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool)):
            return self._bad_request("top_n must be an integer")
        scores, n_tokens, err = await self._score_pairs([(query, d) for d in documents])
        if err is not None:
            return err
        self.acct["rerank_requests"] += 1
        # Stable sort: equal scores keep the documents' order. top_n <= 0 means all, as in vLLM.
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        if top_n is not None and top_n > 0:
            order = order[:top_n]
        return JSONResponse({
            "id": f"rerank-{uuid.uuid4().hex}", "model": self.spec.model_name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "results": [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]}
                        for i in order],
        })

    async def _score(self, request):
        """POST /v1/score and /score: one score per (text_1, text_2) pair, 1:N or N:N, in input order."""
        from starlette.responses import JSONResponse

        body, err = await self._scoring_body(request)
        if err is not None:
            return err
        sides = []
        for key in ("text_1", "text_2"):
            value = body.get(key)
            value = [value] if isinstance(value, str) else value
            if not _is_str_list(value) or not value:
                return self._bad_request(f"{key} must be a string or a non-empty list of strings")
            sides.append(value)
        firsts, seconds = sides
        if len(firsts) == 1:  # 1:N; vLLM broadcasts a one-item list as it does a string
            firsts = firsts * len(seconds)
        elif len(firsts) != len(seconds):
            return self._bad_request(f"text_1 and text_2 must be 1:1, 1:N or N:N, got {len(firsts)} and "
                                     f"{len(seconds)} items")
        scores, n_tokens, err = await self._score_pairs(list(zip(firsts, seconds)))
        if err is not None:
            return err
        self.acct["score_requests"] += 1
        return JSONResponse({
            "id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
            "model": self.spec.model_name,
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens, "completion_tokens": 0},
        })

    async def _score_pairs(self, pairs: list[tuple[str, str]]):
        """(scores, prompt tokens, None), or (None, 0, error response): faults, the context limit per
        pair, then the prefill time of every pair (a cross-encoder reads query and document together)."""
        fault = await self._pre_faults()
        if fault is not None:
            return None, 0, fault
        lengths = [len(q.split()) + len(d.split()) for q, d in pairs]
        longest = max(lengths, default=0)
        if longest > self.spec.max_model_len:
            return None, 0, self._bad_request(
                f"This model's maximum context length is {self.spec.max_model_len} tokens. However, you requested "
                f"{longest} tokens in the input for scoring. Please reduce the length of the input.")
        n_tokens = sum(lengths)
        err = await self._scoring_time(n_tokens)
        if err is not None:
            return None, 0, err
        self.engines[0].counters["prompt_tokens"] += n_tokens
        return [relevance(q, d) for q, d in pairs], n_tokens, None

    async def _embedding_time(self, n_tokens: int):
        """Wait out an embedding request in the replica's embedding lane (FIFO, one batch at a time, a
        small GPU encoder: embed_base_s + embed_s_per_token * input tokens, legacy: instant); None, or a
        503 when the replica was killed meanwhile."""
        spec = self.spec
        if spec.cost_model == "legacy":
            return None
        cost = (spec.embed_base_s + spec.embed_s_per_token * n_tokens) * self.faults.slowdown / spec.speed
        loop = asyncio.get_running_loop()
        epoch = self.epoch
        done_at = max(loop.time(), self.embedding_free_at) + cost * self.fleet.time_scale
        self.embedding_free_at = done_at
        self.acct["embedding_s"] += cost
        await asyncio.sleep(max(0.0, done_at - loop.time()))
        if epoch != self.epoch or not self.alive:
            return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        return None

    async def _scoring_time(self, n_tokens: int):
        """Wait out a scoring request's prefill in the replica's scoring lane (FIFO, one request at a
        time); None, or a 503 when the replica was killed meanwhile."""
        spec = self.spec
        cost = spec.prefill_s_per_token * max(1, n_tokens) * self.faults.slowdown / spec.speed
        loop = asyncio.get_running_loop()
        epoch = self.epoch
        # Each request's end is fixed on arrival from the lane's own clock, so sleep overshoot does not
        # add up across a queue of requests.
        done_at = max(loop.time(), self.scoring_free_at) + cost * self.fleet.time_scale
        self.scoring_free_at = done_at
        self.acct["scoring_s"] += cost
        await asyncio.sleep(max(0.0, done_at - loop.time()))
        if epoch != self.epoch or not self.alive:
            return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        return None

