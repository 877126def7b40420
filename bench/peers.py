"""What users would run instead of the platform, on the same corpus, fleet, parser and embedder.

Bench-only (the `bench` extra: llama-index-core, llama-index-llms-openai-like); nothing here is part of
the product. `bench.ingest` starts the fleet, samples its /metrics and times each peer; this module is
the peers' own work, from the files to one committed index:

* `peer_llamaindex`: LlamaIndex's `IngestionPipeline([DocumentContextExtractor, MiniLM])` over the
  platform's chunks as `TextNode`s whose source documents sit in a `SimpleDocumentStore`; the
  extractor's `num_workers` (its concurrent LLM calls) is the fleet's total cap, its LLM an
  `OpenAILike` whose httpx clients send every request to a replica drawn at random (`ShuffleTransport`:
  LiteLLM's `simple-shuffle`, what a LlamaIndex user puts in front of a fleet); the embedder is
  the platform's MiniLM behind LlamaIndex's `BaseEmbedding` with the platform's batch size; then one
  bulk insert of the nodes into the same kind of store as the platform's.
* `peer_cookbook`: the published contextual-retrieval recipe: a thread pool over every chunk of the
  corpus (as many threads as the fleet's total cap; the OpenAI client, shuffled the same way), then
  embedding of every chunk, then one bulk insert.

Each runs with one of two prompts. `own`: the peer as designed, the whole document (cut to fit the
model's context, as a user must: LlamaIndex only warns and the server would refuse) before each
chunk, with the peer's own instruction and output limit. `ours`: the platform's exact requests (the
section context, the prompt file, max_tokens), so that only scheduling and pipelining differ.
Both peers parse with the platform's parser, one file after another, inside the timed work.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

Prompt = Literal["own", "ours"]
PROMPTS: tuple[Prompt, ...] = ("own", "ours")
# The peers' own output limits: the cookbook's `max_tokens`, `DocumentContextExtractor`'s default.
COOKBOOK_MAX_TOKENS = 1024
LLAMAINDEX_MAX_TOKENS = 512
# Room kept below the context limit for the chat template and the tokenizer's disagreement with the server's.
CONTEXT_MARGIN = 256

# The recipe's two prompt parts: the document first (the cached prefix), then the chunk and the instruction.
COOKBOOK_DOCUMENT = "<document>\n{document}\n</document>"
COOKBOOK_CHUNK = (
    "Here is the chunk we want to situate within the whole document\n<chunk>\n{chunk}\n</chunk>\n\n"
    "Please give a short succinct context to situate this chunk within the overall document for the purposes "
    "of improving search retrieval of the chunk. Answer only with the succinct context and nothing else."
)


# ---- one endpoint in front of many replicas ------------------------------------------------------

BALANCERS = ("random", "least_busy")


class _Shuffle:
    """Picks a replica per request and points the request at it (the transports below share it).

    `random`: uniformly at random (LiteLLM's simple-shuffle without weights); `least_busy`: the
    replica with the fewest requests outstanding through this balancer, ties drawn at random (a
    least-outstanding-requests balancer, e.g. Envoy's LEAST_REQUEST or nginx's least_conn, in front of
    the fleet). Non-streaming answers: a request is outstanding until its response arrives."""

    def __init__(self, base_urls: list[str], seed: int | None, balancer: str = "random"):
        if balancer not in BALANCERS:
            raise ValueError(f"balancer must be one of {BALANCERS}, got {balancer!r}")
        self.targets = [httpx.URL(u) for u in base_urls]
        self.balancer = balancer
        self.outstanding = [0] * len(self.targets)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def retarget(self, request: httpx.Request) -> int:
        with self._lock:
            if self.balancer == "random":
                index = self._rng.randrange(len(self.targets))
            else:
                least = min(self.outstanding)
                index = self._rng.choice([i for i, n in enumerate(self.outstanding) if n == least])
            self.outstanding[index] += 1
        target = self.targets[index]
        request.url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
        request.headers["host"] = request.url.netloc.decode("ascii")
        return index

    def done(self, index: int) -> None:
        with self._lock:
            self.outstanding[index] -= 1


class ShuffleTransport(_Shuffle, httpx.BaseTransport):
    """Each request to a replica the balancer picks (see `_Shuffle`)."""

    def __init__(self, base_urls: list[str], seed: int | None = None, limits: httpx.Limits | None = None,
                 balancer: str = "random"):
        super().__init__(base_urls, seed, balancer)
        self._inner = httpx.HTTPTransport(limits=limits or httpx.Limits())

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        index = self.retarget(request)
        try:
            return self._inner.handle_request(request)
        finally:
            self.done(index)

    def close(self) -> None:
        self._inner.close()


class AsyncShuffleTransport(_Shuffle, httpx.AsyncBaseTransport):
    """`ShuffleTransport` for asyncio clients."""

    def __init__(self, base_urls: list[str], seed: int | None = None, limits: httpx.Limits | None = None,
                 balancer: str = "random"):
        super().__init__(base_urls, seed, balancer)
        self._inner = httpx.AsyncHTTPTransport(limits=limits or httpx.Limits())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self.retarget(request)
        try:
            return await self._inner.handle_async_request(request)
        finally:
            self.done(index)

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---- what both peers share ------------------------------------------------------------------------

@dataclass
class PeerJob:
    """One peer run's inputs. `ours_requests(doc)` is the platform's (chunk, FleetRequest) pairs of a
    document; `store` has the sources and `index_version` registered."""

    paths: list[Path]
    base_urls: list[str]
    model: str
    context_limit: int
    workers: int
    prompt: Prompt
    counter: Any
    settings: Any
    embedder: Any
    store: Any
    index_version: str
    ours_requests: Callable[[Any], list[tuple[Any, Any]]]
    seed: int = 0
    balancer: str = "random"  # see `_Shuffle`


@dataclass
class PeerResult:
    chunks: int
    headers_missing: int
    parse_s: float
    headers_s: float
    embed_s: float
    insert_s: float

    def figures(self) -> dict:
        return {"chunks": self.chunks, "headers_missing": self.headers_missing, "parse_s": round(self.parse_s, 2),
                "headers_s": round(self.headers_s, 2), "embed_s": round(self.embed_s, 2),
                "insert_s": round(self.insert_s, 2)}


def parse_all(job: PeerJob) -> list:
    """The platform's parser, one file after another (what a script does before its thread pool)."""
    from contextual_assets.ingest.inbox.document_keys import partition_key_for
    from contextual_assets.ingest.pipeline.parse import parse_document

    return [parse_document(partition_key_for(p.name), p, job.counter, chunk_tokens=job.settings.chunk_tokens,
                           max_bytes=10**9, max_pdf_pages=10**6) for p in job.paths]


def whole_documents(doc) -> dict[str, str]:
    """Each logical document of a parsed file (a pre-chunked file may hold several) as one text."""
    parts: dict[str, list[str]] = defaultdict(list)
    for chunk in doc.chunks:
        parts[chunk.source_doc].append(chunk.text)
    return {source: "\n\n".join(texts) for source, texts in parts.items()}


def head_within(text: str, budget: int, counter) -> str:
    """The longest word-boundary head of `text` the counter puts within `budget` tokens."""
    if counter.count(text) <= budget:
        return text
    words = text.split(" ")
    low, high = 0, len(words)  # a binary search on the number of words kept: about 15 counts for 20k words
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(" ".join(words[:middle])) <= budget:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])


def own_documents(doc, job: PeerJob, max_tokens: int) -> dict[str, str]:
    """Each logical document whole, cut (once) to what the context leaves beside the file's longest
    chunk, the instruction and the answer."""
    budget = job.context_limit - max_tokens - max(c.token_count for c in doc.chunks) - CONTEXT_MARGIN
    return {source: head_within(text, budget, job.counter) for source, text in whole_documents(doc).items()}


def bulk_insert(job: PeerJob, docs: list, headers: dict[tuple[str, int], str],
                vectors: dict[tuple[str, int], list[float]], source: str) -> None:
    """Every document in one transaction (the recipes' single write at the end)."""
    from contextual_assets.models import DocumentRecord, EmbeddedChunk

    batch = []
    for doc in docs:
        chunks = [EmbeddedChunk(**c.model_dump(), header=headers.get((c.doc_id, c.ordinal), ""), header_source=source,
                                header_model=job.model, embedding=vectors[(c.doc_id, c.ordinal)]) for c in doc.chunks]
        batch.append((DocumentRecord(doc_id=doc.doc_id, index_version=job.index_version, source_path=doc.source_path,
                                     kind=doc.kind, title=doc.title, file_hash=doc.file_hash, n_chunks=len(chunks),
                                     updated_at=""), chunks))
    job.store.corpus.replace_documents(batch)


def _limits(job: PeerJob) -> httpx.Limits:
    return httpx.Limits(max_connections=2 * job.workers, max_keepalive_connections=job.workers)


# ---- the cookbook ---------------------------------------------------------------------------------

def cookbook_messages(document: str, chunk: str) -> list[dict]:
    """The recipe's one user message: the document part first (so a prefix cache holds it), then the chunk."""
    return [{"role": "user", "content": [{"type": "text", "text": COOKBOOK_DOCUMENT.format(document=document)},
                                         {"type": "text", "text": COOKBOOK_CHUNK.format(chunk=chunk)}]}]


def run_cookbook(job: PeerJob) -> PeerResult:
    import openai

    from contextual_assets.embedding import embed_chunks
    from contextual_assets.models import HeaderedChunk

    t0 = time.monotonic()
    docs = parse_all(job)
    t_parse = time.monotonic()
    http = httpx.Client(transport=ShuffleTransport(job.base_urls, job.seed, _limits(job), job.balancer), timeout=600)
    client = openai.OpenAI(base_url=job.base_urls[0], api_key="none", http_client=http)

    def situate(chunk, messages: list[dict], max_tokens: int) -> tuple[tuple[str, int], str]:
        answer = client.chat.completions.create(model=job.model, messages=messages, max_tokens=max_tokens,
                                                temperature=0.0)
        return (chunk.doc_id, chunk.ordinal), answer.choices[0].message.content or ""

    jobs = []
    for doc in docs:
        if job.prompt == "ours":
            jobs += [(chunk, request.messages, request.max_tokens) for chunk, request in job.ours_requests(doc)]
            continue
        documents = own_documents(doc, job, COOKBOOK_MAX_TOKENS)
        jobs += [(chunk, cookbook_messages(documents[chunk.source_doc], chunk.text), COOKBOOK_MAX_TOKENS)
                 for chunk in doc.chunks]
    headers: dict[tuple[str, int], str] = {}
    try:
        with ThreadPoolExecutor(max_workers=job.workers) as pool:
            for future in [pool.submit(situate, *j) for j in jobs]:
                key, header = future.result()
                headers[key] = header
    finally:
        http.close()
    t_headers = time.monotonic()
    headered = [HeaderedChunk(**c.model_dump(), header=headers.get((c.doc_id, c.ordinal), ""))
                for doc in docs for c in doc.chunks]
    vectors = {(c.doc_id, c.ordinal): c.embedding for c in embed_chunks(headered, job.embedder)}
    t_embed = time.monotonic()
    bulk_insert(job, docs, headers, vectors, "peer_cookbook")
    t_insert = time.monotonic()
    return PeerResult(chunks=len(headered), headers_missing=sum(1 for c in headered if not c.header),
                      parse_s=t_parse - t0, headers_s=t_headers - t_parse, embed_s=t_embed - t_headers,
                      insert_s=t_insert - t_embed)


# ---- LlamaIndex -----------------------------------------------------------------------------------

def llamaindex_llm(job: PeerJob):
    """The extractor's LLM; it calls `achat` only, so only its asyncio client is shuffled."""
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model=job.model, api_base=job.base_urls[0], api_key="none", is_chat_model=True,
                      context_window=job.context_limit, temperature=0.0, timeout=600,
                      async_http_client=httpx.AsyncClient(
                          transport=AsyncShuffleTransport(job.base_urls, job.seed, _limits(job), job.balancer)))


def llamaindex_embedding(embedder, batch_size: int):
    """The platform's embedder behind LlamaIndex's interface (same model, same batch size)."""
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from pydantic import PrivateAttr

    class PlatformEmbedding(BaseEmbedding):
        _embedder: Any = PrivateAttr()
        seconds: float = 0.0  # spent embedding: the pipeline runs its transformations in turn

        def __init__(self, inner, **kwargs):
            super().__init__(model_name=inner.identity, embed_batch_size=batch_size, **kwargs)
            self._embedder = inner

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._embedder.embed([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._embedder.embed([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            started = time.monotonic()
            vectors = self._embedder.embed(texts)
            self.seconds += time.monotonic() - started
            return vectors

    return PlatformEmbedding(embedder)


def section_context_extractor(requests: dict[str, Any], **kwargs):
    """`DocumentContextExtractor` with the platform's request per node instead of the library's
    document-plus-chunk messages: the library's node order, worker count and LLM calls are kept."""
    from llama_index.core.extractors import DocumentContextExtractor
    from llama_index.core.llms import ChatMessage
    from pydantic import PrivateAttr

    class SectionContextExtractor(DocumentContextExtractor):
        _requests: dict[str, Any] = PrivateAttr()

        def __init__(self, **kw):
            super().__init__(**kw)
            self._requests = requests

        async def _agenerate_node_context(self, node, metadata, document, prompt, key):
            request = self._requests[node.node_id]
            messages = [ChatMessage(role=m["role"], content=m["content"]) for m in request.messages]
            try:
                response = await self.llm.achat(messages, max_tokens=request.max_tokens)
                metadata[key] = response.message.content or ""
            except Exception as exc:  # the library's behaviour: log, leave the node without context
                logging.warning("no context for node %s: %s", node.node_id, exc)
            return metadata

    return SectionContextExtractor(**kwargs)


def run_llamaindex(job: PeerJob) -> PeerResult:
    from llama_index.core.extractors import DocumentContextExtractor
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.storage.docstore import SimpleDocumentStore

    t0 = time.monotonic()
    docs = parse_all(job)
    t_parse = time.monotonic()
    docstore = SimpleDocumentStore()
    nodes, by_node, requests = [], {}, {}
    for doc in docs:
        ours = {(c.doc_id, c.ordinal): r for c, r in job.ours_requests(doc)} if job.prompt == "ours" else {}
        # With our prompts the library still reads (and counts) each document; only the messages differ.
        documents = whole_documents(doc) if ours else own_documents(doc, job, LLAMAINDEX_MAX_TOKENS)
        docstore.add_documents([Document(text=text, id_=f"{doc.doc_id}#{source}") for source, text in documents.items()])
        for chunk in doc.chunks:
            node_id = f"{doc.doc_id}:{chunk.ordinal}"
            node = TextNode(text=chunk.text, id_=node_id, relationships={
                NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"{doc.doc_id}#{chunk.source_doc}")})
            nodes.append(node)
            by_node[node_id] = chunk
            if ours:
                requests[node_id] = ours[(chunk.doc_id, chunk.ordinal)]
    # show_progress off: a progress bar per run is all it changes (and it would fill the bench's output).
    common = {"docstore": docstore, "max_context_length": job.context_limit, "num_workers": job.workers,
              "show_progress": False}
    if job.prompt == "ours":
        extractor = section_context_extractor(requests, llm=llamaindex_llm(job), **common)
    else:  # as designed: the library's prompt and output limit
        extractor = DocumentContextExtractor(llm=llamaindex_llm(job), max_output_tokens=LLAMAINDEX_MAX_TOKENS,
                                             **common)
    embedding = llamaindex_embedding(job.embedder, getattr(job.embedder, "batch_size", 32))
    pipeline = IngestionPipeline(transformations=[extractor, embedding])
    out = pipeline.run(nodes=nodes, show_progress=False)
    t_done = time.monotonic()
    headers = {(by_node[n.node_id].doc_id, by_node[n.node_id].ordinal): n.metadata.get(extractor.key, "")
               for n in out}
    vectors = {(by_node[n.node_id].doc_id, by_node[n.node_id].ordinal): n.embedding for n in out}
    bulk_insert(job, docs, headers, vectors, "peer_llamaindex")
    t_insert = time.monotonic()
    return PeerResult(chunks=len(out), headers_missing=sum(1 for h in headers.values() if not h),
                      parse_s=t_parse - t0, headers_s=t_done - t_parse - embedding.seconds,
                      embed_s=embedding.seconds, insert_s=t_insert - t_done)


PEERS: dict[str, Callable[[PeerJob], PeerResult]] = {"peer_llamaindex": run_llamaindex, "peer_cookbook": run_cookbook}
