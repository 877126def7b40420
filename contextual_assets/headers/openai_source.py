"""Headers from one or more OpenAI-compatible endpoints (vLLM replicas, a router, a cloud API).

Requests share one async pool, go to the endpoint with the fewest requests in flight, are capped
per endpoint, retried with jittered backoff on another endpoint, and validated before use.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import httpx

from ..errors import ConfigurationError, HeaderGenerationError
from ..tokens import TokenCounter
from .base import HeaderRequest, HeaderResult, HeaderSource
from .prompt import PromptTemplate
from .validation import HeaderValidationError, validate_header

_EMBEDDING_HINTS = ("embed", "bge-", "e5-", "gte-", "minilm", "rerank")


@dataclass
class EndpointState:
    base_url: str
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    semaphore: asyncio.Semaphore | None = None


@dataclass
class HeaderRunStats:
    requests: int = 0
    retries: int = 0
    failovers: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    invalid: int = 0
    latencies: list[float] = field(default_factory=list)
    per_endpoint: dict[str, int] = field(default_factory=dict)


def _normalise_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def list_served_models(base_url: str, api_key: str | None, timeout: float = 10.0) -> list[dict]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.get(f"{_normalise_base_url(base_url)}/models", headers=headers, timeout=timeout)
    response.raise_for_status()
    return list(response.json().get("data", []))


def discover_model(base_urls: list[str], api_key: str | None) -> str:
    """The one chat model every endpoint serves; a clear error listing what each answered otherwise."""
    answers: dict[str, str] = {}
    found: dict[str, list[str]] = {}
    for url in base_urls:
        try:
            models = list_served_models(url, api_key)
        except Exception as exc:  # network errors, HTTP errors, bad JSON
            answers[url] = f"unreachable or invalid answer ({type(exc).__name__}: {str(exc)[:120]})"
            continue
        ids = [str(m.get("id", "")) for m in models]
        usable = [i for i in ids if i and not any(h in i.lower() for h in _EMBEDDING_HINTS)]
        answers[url] = f"models {ids}" if ids else "no models"
        if usable:
            found[url] = usable
    names = {ids[0] for ids in found.values()}
    if len(found) != len(base_urls) or not names:
        detail = "; ".join(f"{u}: {a}" for u, a in answers.items())
        raise ConfigurationError(
            f"could not discover a header model on every endpoint ({detail}); pin one with CTX_LLM_MODEL"
        )
    if len(names) > 1:
        raise ConfigurationError(f"endpoints serve different models {sorted(names)}; pin one with CTX_LLM_MODEL")
    return names.pop()


class OpenAIHeaderSource(HeaderSource):
    name = "openai"

    def __init__(
        self,
        base_urls: list[str],
        prompt: PromptTemplate,
        counter: TokenCounter,
        *,
        model: str | None = None,
        api_key: str | None = None,
        max_output_tokens: int = 80,
        max_header_tokens: int = 64,
        max_in_flight: int = 16,
        timeout_s: float = 60.0,
        max_attempts: int = 4,
    ):
        if not base_urls:
            raise ConfigurationError("the openai header source needs at least one endpoint (CTX_LLM_BASE_URLS)")
        self.base_urls = [_normalise_base_url(u) for u in base_urls]
        self.prompt = prompt
        self.counter = counter
        self._api_key = api_key
        self.model = model or discover_model(self.base_urls, api_key)
        self.max_output_tokens = max_output_tokens
        self.max_header_tokens = max_header_tokens
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.last_stats = HeaderRunStats()

    @property
    def identity(self) -> dict[str, str]:
        return {"header_source": "openai", "header_model": self.model, "prompt_version": self.prompt.version}

    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        return asyncio.run(self._generate(requests))

    async def _generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        from openai import AsyncOpenAI

        stats = HeaderRunStats()
        self.last_stats = stats
        endpoints = [EndpointState(u, semaphore=asyncio.Semaphore(self.max_in_flight)) for u in self.base_urls]
        clients = {
            e.base_url: AsyncOpenAI(base_url=e.base_url, api_key=self._api_key or "not-needed", max_retries=0,
                                    timeout=self.timeout_s)
            for e in endpoints
        }
        try:
            return list(await asyncio.gather(*(self._one(r, endpoints, clients, stats) for r in requests)))
        finally:
            for client in clients.values():
                await client.close()

    async def _one(self, request: HeaderRequest, endpoints, clients, stats: HeaderRunStats) -> HeaderResult:
        chunk = request.chunk
        messages = self.prompt.render(
            title=chunk.title, section_path=" > ".join(chunk.section_path), context=request.context, chunk=chunk.text
        )
        errors: list[str] = []
        tried: set[str] = set()
        for attempt in range(1, self.max_attempts + 1):
            # Least in-flight first; prefer an endpoint not yet tried for this chunk (failover).
            endpoint = min(endpoints, key=lambda e: (e.base_url in tried, e.in_flight, e.failures, random.random()))
            if tried and endpoint.base_url not in tried:
                stats.failovers += 1
            tried.add(endpoint.base_url)
            assert endpoint.semaphore is not None
            async with endpoint.semaphore:
                endpoint.in_flight += 1
                started = time.monotonic()
                try:
                    response = await clients[endpoint.base_url].chat.completions.create(
                        model=self.model, messages=messages, max_tokens=self.max_output_tokens,
                        temperature=0.0 if attempt == 1 else 0.7,
                    )
                    stats.requests += 1
                    endpoint.requests += 1
                    stats.per_endpoint[endpoint.base_url] = stats.per_endpoint.get(endpoint.base_url, 0) + 1
                    latency = time.monotonic() - started
                    stats.latencies.append(latency)
                    usage = response.usage
                    if usage is not None:
                        stats.prompt_tokens += usage.prompt_tokens or 0
                        stats.completion_tokens += usage.completion_tokens or 0
                    raw = response.choices[0].message.content or "" if response.choices else ""
                    header = validate_header(raw, chunk.text, max_tokens=self.max_header_tokens,
                                             count_tokens=self.counter.count, salvage=True)
                    return HeaderResult(
                        header=header, source="openai", model=self.model,
                        prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
                        completion_tokens=(usage.completion_tokens or 0) if usage else 0,
                        latency_s=latency, attempts=attempt, endpoint=endpoint.base_url,
                    )
                except HeaderValidationError as exc:
                    stats.invalid += 1
                    errors.append(f"invalid header ({exc})")
                except Exception as exc:  # transport, HTTP 5xx/4xx, timeouts
                    endpoint.failures += 1
                    errors.append(f"{endpoint.base_url}: {type(exc).__name__}: {str(exc)[:160]}")
                finally:
                    endpoint.in_flight -= 1
            if attempt < self.max_attempts:
                stats.retries += 1
                await asyncio.sleep(min(4.0, 0.1 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))
        raise HeaderGenerationError(
            f"no valid header for chunk {chunk.ordinal} of {chunk.doc_id} after {self.max_attempts} attempts: "
            + " | ".join(errors[-3:])
        )
