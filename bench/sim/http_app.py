"""The HTTP side of a simulated replica (bench/sim/fleet.py): the Starlette app, chat completions,
admin endpoints, request faults and the canned answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid

from bench.sim.engine import (
    natural_length,
)
from bench.sim.specs import ReplicaDown
from bench.sim.text import (
    _CHUNK_RE,
    _ID_RE,
    _TITLE_RE,
    header_sentence,
    prompt_text,
)


def _error(status: int, message: str, err_type: str):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": err_type, "param": None, "code": status}},
                        status_code=status)


class ReplicaHttp:
    """Mixin of ``Replica``: its Starlette app and chat handlers (run on the fleet's event loop)."""

    # ---- HTTP

    def _build_app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, PlainTextResponse
        from starlette.routing import Route

        async def models(request):
            data = [self.model_entry()]
            if self.spec.serve_embeddings:
                data.append({"id": self.spec.embedding_model, "object": "model",
                             "created": int(self.fleet.started_wall), "owned_by": "sim",
                             "root": self.spec.embedding_model, "parent": None,
                             "max_model_len": self.spec.max_model_len})
            return JSONResponse({"object": "list", "data": data})

        async def health(request):
            return PlainTextResponse("")

        async def metrics(request):
            return PlainTextResponse(self.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

        def admin(update, current):
            """GET answers `current()`; POST applies a JSON object's keys with `update(**body)`."""

            async def endpoint(request):
                if request.method == "POST":
                    try:
                        body = await request.json()
                        if not isinstance(body, dict):
                            raise TypeError("expected a JSON object")
                        return JSONResponse(update(**body))
                    except (ValueError, TypeError) as exc:
                        return _error(400, str(exc), "BadRequestError")
                return JSONResponse(current())

            return endpoint

        admin_faults = admin(self.set_faults, lambda: dataclasses.asdict(self.faults))
        admin_model = admin(self.set_model, self.model_entry)

        async def admin_stats(request):
            return JSONResponse(self.stats())

        return Starlette(routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route("/v1/rerank", self._rerank, methods=["POST"]),
            Route("/rerank", self._rerank, methods=["POST"]),  # vLLM serves both paths
            Route("/v1/score", self._score, methods=["POST"]),
            Route("/score", self._score, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/admin/faults", admin_faults, methods=["GET", "POST"]),
            Route("/admin/model", admin_model, methods=["GET", "POST"]),
            Route("/admin/stats", admin_stats, methods=["GET"]),
        ])

    async def _pre_faults(self):
        """Stall and error injection shared by the POST endpoints: a response, or None to go on."""
        f = self.faults
        epoch = self.epoch
        if f.stall_s > 0 and f.stall_rate > 0 and self.rng.random() < f.stall_rate:
            self.acct["stalls_injected"] += 1
            await asyncio.sleep(f.stall_s)
            if epoch != self.epoch or not self.alive:
                return _error(503, "replica restarted during the request", "ServiceUnavailableError")
        if f.error_rate > 0 and self.rng.random() < f.error_rate:
            self.acct["errors_injected"] += 1
            return _error(500, "simulated internal server error (fault injection)", "InternalServerError")
        return None

    async def _read_json(self, request):
        try:
            body = await request.json()
        except Exception:  # noqa: BLE001 - any unparsable body
            return None, _error(400, "request body is not valid JSON", "BadRequestError")
        if not isinstance(body, dict):
            return None, _error(400, "request body must be a JSON object", "BadRequestError")
        return body, None

    def _model_error(self, body: dict):
        """404 unless the request names the served model (no name: the served one); else None."""
        model = body.get("model") or self.spec.model_name
        if model != self.spec.model_name:
            self.acct["rejected"] += 1
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        return None

    def _bad_request(self, message: str):
        self.acct["rejected"] += 1
        return _error(400, message, "BadRequestError")

    async def _chat(self, request):
        body, err = await self._read_json(request)
        if err is not None:
            return err
        self.open_requests += 1
        self.peak_open_requests = max(self.peak_open_requests, self.open_requests)
        try:
            return await self._until_disconnect(request, self._chat_answer(body))
        finally:
            self.open_requests -= 1

    async def _until_disconnect(self, request, answer):
        """The response of coroutine `answer`, or a 499 as soon as the client goes away (stalled or in
        the engine): the work is cancelled and counted as aborted, as vLLM aborts a disconnected request."""
        epoch = self.epoch
        task = asyncio.ensure_future(answer)
        watcher = asyncio.ensure_future(_wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
        if task in done:
            return task.result()
        if epoch == self.epoch:  # a kill's dropped connections are not client aborts
            self.acct["aborted"] += 1
        return _error(499, "client disconnected", "ClientClosedRequest")

    async def _chat_answer(self, body: dict):
        err = self._chat_request_error(body)
        if err is not None:
            return err
        fault = await self._pre_faults()
        if fault is not None:
            return fault

        prompt, last_user = prompt_text(body["messages"])
        tokens = prompt.split()
        n_prompt = len(tokens)
        max_tokens, err = self._max_tokens(body, n_prompt)
        if err is not None:
            return err

        content, target, finish = self._bounded_answer(body, prompt, last_user, max_tokens)
        if not self.engines[0].fits_ever(n_prompt, target):
            self.acct["rejected"] += 1
            return _error(400, f"The request needs {n_prompt + target} tokens of KV cache ({n_prompt} prompt, "
                               f"{target} output) but the engine holds {self.engines[0].num_blocks} blocks of "
                               f"{self.spec.block_size} tokens; it can never be scheduled.", "BadRequestError")

        try:
            generated, e = await self.generate(tokens, target)
        except ReplicaDown:
            return _error(503, "replica is shutting down", "ServiceUnavailableError")
        self.engines[e].counters["success_length" if finish == "length" else "success_stop"] += 1
        return self._completion(content, finish, n_prompt, generated)

    def _chat_request_error(self, body: dict):
        """The 404 or 400 a chat request gets before any fault or work (wrong model, streaming, no
        messages), counted as rejected; else None."""
        err = self._model_error(body)
        if err is not None:
            return err
        if body.get("stream"):
            self.acct["rejected"] += 1
            return _error(400, "the fleet simulator does not stream; send stream=false", "BadRequestError")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self.acct["rejected"] += 1
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        return None

    def _max_tokens(self, body: dict, n_prompt: int):
        """(max_tokens, None), the request's output bound (default: the room left in the context), or
        (None, the 400 of a bound that is not a positive integer or does not fit the context)."""
        spec = self.spec
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        room = spec.max_model_len - n_prompt
        if max_tokens is None:
            if room < 1:
                self.acct["rejected"] += 1
                return None, _error(400, self._ctx_message(n_prompt, 0), "BadRequestError")
            max_tokens = room
        if not isinstance(max_tokens, int) or max_tokens < 1:
            self.acct["rejected"] += 1
            return None, _error(400, "max_tokens must be a positive integer", "BadRequestError")
        if n_prompt + max_tokens > spec.max_model_len:
            self.acct["rejected"] += 1
            return None, _error(400, self._ctx_message(n_prompt, max_tokens), "BadRequestError")
        return max_tokens, None

    def _bounded_answer(self, body: dict, prompt: str, last_user: str, max_tokens: int) -> tuple[str, int, str]:
        """(content, output tokens to generate, finish reason): the answer cut at `max_tokens` words
        ("length") or whole ("stop")."""
        content, natural = self._answer(body, prompt, last_user)
        words = content.split(" ") if content else []
        target = min(natural, max_tokens)
        finish = "stop"
        if target < len(words):
            content = " ".join(words[:target])
            finish = "length"
        return content, target, finish

    def _completion(self, content: str, finish: str, n_prompt: int, generated: int):
        """The chat.completion response of a finished request."""
        from starlette.responses import JSONResponse

        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.spec.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": generated,
                      "total_tokens": n_prompt + generated},
        })

    def _ctx_message(self, n_prompt: int, max_tokens: int) -> str:
        return (f"This model's maximum context length is {self.spec.max_model_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion.")

    def _answer(self, body: dict, prompt: str, last_user: str) -> tuple[str, int]:
        """(content, natural output length in tokens) for a request, faults included."""
        mean = self.spec.output_tokens_mean
        rf = body.get("response_format")
        batch = (isinstance(rf, dict) and rf.get("type") in ("json_object", "json_schema")) \
            or "Answer as JSON" in last_user
        chunks = list(_CHUNK_RE.finditer(last_user)) or list(_CHUNK_RE.finditer(prompt))
        title_match = _TITLE_RE.search(last_user) or _TITLE_RE.search(prompt)
        title = title_match.group(1) if title_match else None
        f = self.faults
        malformed = None
        matches = f.malformed_match is None or any(f.malformed_match in c.group("body") for c in chunks)
        if f.malformed is not None and matches and f.malformed_rate > 0 and self.rng.random() < f.malformed_rate:
            malformed = f.malformed
            self.acct["malformed_injected"] += 1

        def jitter(key: str) -> int:
            return natural_length(key, mean, self.spec.cost_model)

        if malformed == "empty":
            return "", 1
        if malformed == "overlong":
            filler = ("and the passage goes on to discuss how this relates to the wider document and its many "
                      "sections which in turn connect to further themes").split()
            text = " ".join(filler[i % len(filler)] for i in range(400))
            return text, 400
        if malformed == "echo":
            return last_user, len(last_user.split(" "))
        if malformed == "copy":
            text = " ".join((chunks[0].group("body") if chunks else last_user).split())
            return text, len(text.split(" "))
        if malformed == "bad_json":
            ident = _ID_RE.search(chunks[0].group("attrs")) if chunks else None
            text = '{"headers": [{"id": "%s", "header": "This passage covers' % (ident.group(1) if ident else "0")
            return text, jitter(prompt)

        if batch:
            entries = []
            natural = 0
            for i, m in enumerate(chunks):
                ident_match = _ID_RE.search(m.group("attrs"))
                ident = ident_match.group(1) if ident_match else str(i)
                key = f"{prompt}\x00{ident}"
                entries.append({"id": ident, "header": header_sentence(m.group("body"), title, key)})
                natural += jitter(key)
            text = json.dumps({"headers": entries}, ensure_ascii=False)
            return text, max(natural, len(text.split(" ")), 1)
        subject = chunks[-1].group("body") if chunks else last_user
        text = header_sentence(subject, title, prompt)
        return text, max(jitter(prompt), len(text.split(" ")))



async def _wait_disconnect(request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
