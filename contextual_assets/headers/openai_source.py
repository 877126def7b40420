"""Headers from the header fleet (OpenAI-compatible replicas), with a header cache in the store,
request budgets, validation, and optional structured batching (K chunks per request, as JSON)."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, ValidationError

from contextual_assets.parsing.tokens import TokenCounter

from ..errors import HeaderGenerationError
from ..fleet.pool import HeaderFleet
from ..fleet.types import FleetRequest, FleetResult, RequestTooLargeError
from ..store.header_cache import HeaderCache
from .base import HeaderRequest, HeaderResult, HeaderSource
from .budget import (
    FittedPrompt,
    context_limit_in,
    estimate_tokens,
    fit_prompt,
    fit_prompts,
)
from .cache_key import HEADER_KEY_SCHEME, header_cache_key
from .prompt import PromptTemplate, escape_data
from .run_stats import HeaderRunStats
from .structural import StructuralHeaderSource
from .validation import validate_header

CACHE_FLUSH_EVERY = 16
FIRST_SLICE = 8  # a document's first requests are sent once this many of its chunks are fitted
# Our prompt-size estimate uses the embedder's tokenizer, not the served model's: a prompt the server
# refuses as over its context is fitted again once, to the limit it names (else the known one), with this
# much more margin.
REFIT_SAFETY = 1.5


class _BatchItem(BaseModel):
    id: str
    header: str


class _BatchAnswer(BaseModel):
    headers: list[_BatchItem]


def prompt_version_of(prompt: PromptTemplate, batch_prompt: PromptTemplate | None, batch_size: int) -> str:
    if batch_size > 1 and batch_prompt is not None:
        return f"{prompt.version}+{batch_prompt.version}/k{batch_size}"
    return prompt.version


def openai_identity(weights: str, revision: str, prompt_version: str) -> dict[str, str]:
    """The header part of the index-version fingerprint for headers from a served model: keyed on the
    weights behind the served name (`ResolvedModel.weights`), so an alias moved to other weights is a
    new index version. The header-cache key's scheme is part of it: headers cached under an older rule
    (one that let two documents share a header) never reach a version built under this one."""
    header_model = f"{weights}@{revision}" if revision else weights
    return {"header_source": "openai", "header_model": header_model, "prompt_version": prompt_version,
            "header_cache_key": HEADER_KEY_SCHEME}


class OpenAIHeaderSource(HeaderSource):
    name = "openai"

    def __init__(
        self,
        fleet: HeaderFleet,
        prompt: PromptTemplate,
        counter: TokenCounter,
        *,
        header_cache: HeaderCache | None = None,  # the store's header cache part; None disables caching
        max_output_tokens: int = 80,
        max_header_tokens: int = 64,
        batch_size: int = 1,
        batch_prompt: PromptTemplate | None = None,
        revision: str = "",
        token_safety: float = 1.2,
        fallback_share: float = 0.0,
    ):
        if batch_size > 1 and batch_prompt is None:
            raise HeaderGenerationError("structured batching needs a batch prompt template")
        self.fleet = fleet
        self.prompt = prompt
        self.batch_prompt = batch_prompt
        self.counter = counter
        self.header_cache = header_cache
        self.max_output_tokens = max_output_tokens
        self.max_header_tokens = max_header_tokens
        self.batch_size = batch_size
        self.revision = revision
        self.token_safety = token_safety
        # A chunk the model gives no valid header in every attempt gets the structural header (title,
        # section, page), counted, while at most this share of a document's chunks do; past it the model
        # is not answering the prompt and the document fails with the reason.
        self.fallback_share = fallback_share
        self.last_stats = HeaderRunStats()

    @property
    def model(self) -> str:
        """The served name (same as `served_model`)."""
        return self.fleet.model

    @property
    def served_model(self) -> str:
        """The served name requests use."""
        return self.fleet.model

    @property
    def weights(self) -> str:
        """The weights behind the served name: keys the index version and the header cache."""
        return self.fleet.resolved.weights

    @property
    def prompt_version(self) -> str:
        return prompt_version_of(self.prompt, self.batch_prompt, self.batch_size)

    @property
    def identity(self) -> dict[str, str]:
        return openai_identity(self.fleet.resolved.weights, self.revision, self.prompt_version)

    def _validator(self, chunk_text: str, prompt: PromptTemplate | None = None):
        instructions = (prompt or self.prompt).instructions

        def validate(raw: str) -> str:
            return validate_header(raw, chunk_text, max_tokens=self.max_header_tokens, count_tokens=self.counter.count,
                                   salvage=True, instructions=instructions)

        return validate

    def _single(self, request: HeaderRequest, fitted: FittedPrompt) -> FleetRequest:
        chunk = request.chunk
        return FleetRequest(messages=fitted.messages, est_prompt_tokens=fitted.est_prompt_tokens,
                            max_tokens=self.max_output_tokens, label=f"chunk {chunk.ordinal} of {chunk.doc_id}",
                            validate=self._validator(chunk.text))

    def _batch(self, group: list[tuple[int, HeaderRequest]]) -> FleetRequest | None:
        assert self.batch_prompt is not None
        first, last = group[0][1], group[-1][1]
        context = "\n\n".join([*reversed(first.before), *(r.chunk.text for _, r in group), *last.after])
        chunks = "\n".join(f'<chunk id="{i}">\n{escape_data(r.chunk.text)}\n</chunk>' for i, r in group)
        messages = self.batch_prompt.render(title=first.chunk.title, section_path=" > ".join(first.chunk.section_path),
                                            context=context, chunks=chunks)
        texts = {str(i): r.chunk.text for i, r in group}

        def validate(raw: str) -> dict[int, str]:
            text = raw.strip()
            if text.startswith("```"):
                text = text.strip("`").removeprefix("json").strip()
            try:
                answer = _BatchAnswer.model_validate(json.loads(text))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise HeaderGenerationError(f"batch answer is not the expected JSON ({str(exc)[:80]})") from None
            got = {item.id: item.header for item in answer.headers}
            if set(got) != set(texts):
                raise HeaderGenerationError(f"batch answer has ids {sorted(got)}, expected {sorted(texts)}")
            return {int(i): self._validator(texts[i], self.batch_prompt)(h) for i, h in got.items()}

        max_tokens = self.max_output_tokens * len(group)
        estimate = estimate_tokens(messages, self.counter, self.token_safety)
        limit = self.fleet.context_limit
        if limit is not None and estimate + max_tokens > limit:
            return None  # does not fit as a batch: the caller sends these chunks one by one
        return FleetRequest(messages=messages, est_prompt_tokens=estimate,
                            max_tokens=max_tokens, label=f"chunks {group[0][0]}-{group[-1][0]} of {first.chunk.doc_id}",
                            validate=validate, extra_body={"response_format": {"type": "json_object"}})

    def _groups(self, pending: list[int], requests: list[HeaderRequest]) -> list[list[tuple[int, HeaderRequest]]]:
        groups: list[list[tuple[int, HeaderRequest]]] = []
        for index in pending:
            chunk = requests[index].chunk
            if (groups and len(groups[-1]) < self.batch_size and groups[-1][-1][0] == index - 1
                    and groups[-1][-1][1].chunk.section_path == chunk.section_path):
                groups[-1].append((index, requests[index]))
            else:
                groups.append([(index, requests[index])])
        return groups

    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        results, self.last_stats = self.stream_with_stats(requests)
        return results

    def stream(self, requests: list[HeaderRequest], on_result: Callable[[int, HeaderResult], None],
               cancel: threading.Event | None = None) -> list[HeaderResult]:
        results, self.last_stats = self.stream_with_stats(requests, on_result, cancel)
        return results

    def stream_with_stats(
        self,
        requests: list[HeaderRequest],
        on_result: Callable[[int, HeaderResult], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[list[HeaderResult], HeaderRunStats]:
        """Headers for `requests` (cache first, then the fleet), reported through `on_result` as they
        arrive. Stats are per call: several documents share one source (and fleet) concurrently."""
        started = time.monotonic()
        stats = HeaderRunStats(chunks=len(requests))
        limit = self.fleet.context_limit
        weights = self.fleet.resolved.weights
        fitted: list[FittedPrompt] = []
        keys: list[str] = []
        results: list[HeaderResult | None] = []
        futures: dict[concurrent.futures.Future, list[int]] = {}
        # Fitted, looked up and sent a slice at a time: the first requests leave after a few chunks are
        # fitted, not the whole document (fitting tokenizes each chunk's context: ~0.5 s for 150 chunks).
        # Slices are whole batches (`batch_size`), so batching loses nothing at their edges.
        first_slice = -(-FIRST_SLICE // self.batch_size) * self.batch_size if self.batch_size > 1 else FIRST_SLICE
        try:
            for part in request_slices(len(requests), first_slice):
                if cancel is not None and cancel.is_set():
                    raise HeaderGenerationError(f"cancelled after {part.start} of {len(requests)} requests were sent")
                fitted.extend(fit_prompts([requests[i] for i in part], self.prompt, self.counter, context_limit=limit,
                                          max_output_tokens=self.max_output_tokens, safety=self.token_safety))
                keys.extend(header_cache_key(weights, self.revision, self.prompt_version, fitted[i].messages,
                                             requests[i].chunk.content_hash) for i in part)
                results.extend(self._cached(keys[part.start:part.stop], on_result, first=part.start))
                pending = [i for i in part if results[i] is None]
                futures.update(self._submit(pending, requests, fitted, stats))
        except BaseException:
            for future in futures:  # sent before a later slice failed: free the fleet for other documents
                future.cancel()
            raise
        stats.trimmed_contexts = sum(1 for f in fitted if f.trimmed_parts)
        stats.cut_chunks = sum(1 for f in fitted if f.chunk_cut)
        stats.cache_hits = sum(1 for r in results if r is not None)
        tolerated = int(self.fallback_share * len(requests))
        errors = self._collect(futures, requests, fitted, keys, results, stats, on_result, cancel, tolerated)
        stats.wall_s = time.monotonic() - started
        if len(errors) > tolerated:
            raise HeaderGenerationError(f"{len(errors)} of {len(requests)} chunks got no valid header (at most "
                                        f"{tolerated} may fall back, CTX_LLM_FALLBACK_SHARE); first: {errors[0]}")
        for index, result in enumerate(results):
            if result is None:
                (results[index],) = StructuralHeaderSource().generate([requests[index]])
                stats.fallbacks += 1
                if on_result is not None:
                    on_result(index, results[index])
        return [r for r in results if r is not None], stats

    def _cached(self, keys: list[str], on_result: Callable[[int, HeaderResult], None] | None,
                first: int = 0) -> list[HeaderResult | None]:
        """The headers the cache already holds, in request order (None: not cached), reported at once
        (`keys` are those of requests `first`, `first + 1`, ...)."""
        cached = self.header_cache.cached_headers(keys) if self.header_cache is not None else {}
        results: list[HeaderResult | None] = [None] * len(keys)
        for index, key in enumerate(keys):
            if key in cached:
                results[index] = HeaderResult(header=cached[key], source="openai", model=self.model)
                if on_result is not None:
                    on_result(first + index, results[index])
        return results

    def _send_single(self, request: HeaderRequest, fitted: FittedPrompt) -> concurrent.futures.Future:
        return self.fleet.submit(self._single(request, fitted))

    def _submit(self, pending: list[int], requests: list[HeaderRequest], fitted: list[FittedPrompt],
                stats: HeaderRunStats) -> dict[concurrent.futures.Future, list[int]]:
        """The fleet requests for the chunks not cached (batched where enabled): future -> chunk indices."""
        futures: dict[concurrent.futures.Future, list[int]] = {}
        if self.batch_size > 1:
            for group in self._groups(pending, requests):
                batch = self._batch(group) if len(group) > 1 else None
                if batch is None:
                    for index, request in group:
                        futures[self._send_single(request, fitted[index])] = [index]
                else:
                    stats.batch_requests += 1
                    futures[self.fleet.submit(batch)] = [i for i, _ in group]
        else:
            for index in pending:
                futures[self._send_single(requests[index], fitted[index])] = [index]
        return futures

    def _refit(self, requests: list[HeaderRequest], fitted: list[FittedPrompt], index: int, refusal: str,
               stats: HeaderRunStats) -> concurrent.futures.Future | None:
        """The chunk's prompt fitted again, to the context length the server's refusal names (else the
        known one) with more margin, and sent; None when it cannot fit even so."""
        try:
            fitted[index] = fit_prompt(requests[index], self.prompt, self.counter,
                                       context_limit=context_limit_in(refusal) or self.fleet.context_limit,
                                       max_output_tokens=self.max_output_tokens,
                                       safety=self.token_safety * REFIT_SAFETY)
        except HeaderGenerationError:
            return None
        stats.refits += 1
        return self._send_single(requests[index], fitted[index])

    def _collect(self, futures: dict[concurrent.futures.Future, list[int]], requests: list[HeaderRequest],
                 fitted: list[FittedPrompt], keys: list[str], results: list[HeaderResult | None],
                 stats: HeaderRunStats, on_result: Callable[[int, HeaderResult], None] | None,
                 cancel: threading.Event | None, tolerated: int = 0) -> list[str]:
        """Fill `results` from the fleet's answers as they arrive, caching them; the chunks' errors (past
        `tolerated` of them the document fails: its later headers are no longer reported)."""
        errors: list[str] = []
        to_cache: list[tuple[str, str, str]] = []
        waiting = set(futures)
        refitted: set[int] = set()
        try:
            while waiting:
                done, waiting = concurrent.futures.wait(waiting, timeout=0.5,
                                                        return_when=concurrent.futures.FIRST_COMPLETED)
                if cancel is not None and cancel.is_set():
                    raise HeaderGenerationError(f"cancelled with {len(waiting)} requests still in flight")
                for future in done:
                    indices = futures[future]
                    try:
                        result: FleetResult = future.result()
                    except HeaderGenerationError as exc:
                        # Requests spent on an answer never given count too (a chunk that falls back
                        # cost its attempts all the same).
                        stats.sent += exc.attempts
                        stats.retries += max(0, exc.attempts - 1)
                        if len(indices) > 1:  # batch failed: fall back to one chunk per request
                            stats.batch_fallbacks += 1
                            for index in indices:
                                single = self._send_single(requests[index], fitted[index])
                                futures[single] = [index]
                                waiting.add(single)
                            continue
                        if isinstance(exc, RequestTooLargeError) and indices[0] not in refitted:
                            refit = self._refit(requests, fitted, indices[0], str(exc), stats)
                            if refit is not None:  # cached under its key all the same: the same inputs trim alike
                                refitted.add(indices[0])
                                futures[refit] = indices
                                waiting.add(refit)
                                continue
                        errors.append(str(exc))
                        continue
                    stats.add(result)
                    for index, header in _header_results(result, indices).items():
                        results[index] = header
                        to_cache.append((keys[index], header.header, result.model))
                        if on_result is not None and len(errors) <= tolerated:
                            on_result(index, header)
                # Cache as results arrive: a crash mid-document re-spends no call on finished chunks.
                if self.header_cache is not None and (len(to_cache) >= CACHE_FLUSH_EVERY or not waiting):
                    self.header_cache.cache_headers(to_cache)
                    to_cache = []
        finally:
            for future in waiting:  # cancelled or failed: free the fleet for other documents
                future.cancel()
            if self.header_cache is not None and to_cache:
                self.header_cache.cache_headers(to_cache)
        return errors


def request_slices(count: int, first: int = FIRST_SLICE) -> list[range]:
    """0..count in slices of `first`, then twice as many each time: few cache queries, an early first send."""
    slices, start, size = [], 0, max(1, first)
    while start < count:
        slices.append(range(start, min(count, start + size)))
        start, size = start + size, size * 2
    return slices


def _header_results(result: FleetResult, indices: list[int]) -> dict[int, HeaderResult]:
    """One fleet answer as the header of each chunk it covers (a batch splits its token counts)."""
    values = result.value if len(indices) > 1 else {indices[0]: result.value}
    return {
        index: HeaderResult(
            header=values[index], source="openai", model=result.model,
            prompt_tokens=result.prompt_tokens // len(indices),
            completion_tokens=result.completion_tokens // len(indices), latency_s=result.latency_s,
            attempts=result.attempts, endpoint=result.replica, failovers=result.failovers,
        )
        for index in indices
    }
