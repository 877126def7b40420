"""Request budgets: prompt tokens + max output tokens must fit the model's context length.

The served model's tokenizer is not available to the client, so prompt size is estimated with the
embedder's tokenizer times a safety factor; the server's own count (`usage.prompt_tokens`) is
reported in the run metadata. The context around the chunk is trimmed, farthest part first, until
the estimate fits; a chunk that cannot fit alone is shown from its start, cut to fit (a pre-chunked
import can hold chunks larger than a small header model's context); one whose prompt cannot fit even
so is a per-chunk error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextual_assets.parsing.tokens import TokenCounter

from ..errors import HeaderGenerationError
from .base import HeaderRequest
from .prompt import PromptTemplate

MESSAGE_OVERHEAD_TOKENS = 16  # chat template tokens per request (role markers, BOS/EOS)
MIN_SHOWN_CHARS = 200  # a chunk cut to fit keeps at least this much of its start, else the chunk is an error
# The context length a server states when it refuses a prompt: vLLM ("maximum context length is 4096
# tokens"), llama-server (its error's "n_ctx": 2048).
_LIMIT_IN_REFUSAL = re.compile(r"maximum context length is (\d+)|\"n_ctx\"\s*:\s*(\d+)")


def context_limit_in(refusal: str) -> int | None:
    """The context length a server's "prompt too long" answer names, if it names one."""
    found = _LIMIT_IN_REFUSAL.search(refusal)
    return int(found.group(1) or found.group(2)) if found else None


class ChunkTooLargeError(HeaderGenerationError):
    pass


@dataclass
class FittedPrompt:
    messages: list[dict[str, str]]
    context: str
    est_prompt_tokens: int
    trimmed_parts: int
    chunk_cut: bool = False  # the chunk alone was over the context: the prompt shows its start

def estimate_tokens(messages: list[dict[str, str]], counter: TokenCounter, safety: float) -> int:
    words = sum(counter.count(m["content"]) for m in messages)
    return int(words * safety) + MESSAGE_OVERHEAD_TOKENS


def fit_prompt(request: HeaderRequest, prompt: PromptTemplate, counter: TokenCounter, *,
               context_limit: int | None, max_output_tokens: int, safety: float = 1.2) -> FittedPrompt:
    chunk = request.chunk
    n_before, n_after = len(request.before), len(request.after)
    trimmed = 0
    while True:
        context = request.context(n_before, n_after)
        messages = prompt.render(title=chunk.title, section_path=" > ".join(chunk.section_path), context=context,
                                 chunk=chunk.text)
        estimate = estimate_tokens(messages, counter, safety)
        if context_limit is None or estimate + max_output_tokens <= context_limit:
            return FittedPrompt(messages=messages, context=context, est_prompt_tokens=estimate, trimmed_parts=trimmed)
        if n_before == 0 and n_after == 0:
            return _cut_chunk(request, prompt, counter, context_limit, max_output_tokens, safety, estimate, trimmed)
        # Drop the farthest remaining part on the longer side.
        if n_before >= n_after and n_before > 0:
            n_before -= 1
        else:
            n_after -= 1
        trimmed += 1


def fit_prompts(requests: list[HeaderRequest], prompt: PromptTemplate, counter: TokenCounter, *,
                context_limit: int | None, max_output_tokens: int, safety: float = 1.2) -> list[FittedPrompt]:
    """`fit_prompt` of each request, the same results: every untrimmed prompt is counted in one batch
    (the tokenizer's batch call runs outside the GIL, so the fleet's I/O thread is not starved while a
    document's prompts are fitted); only a prompt over the limit is trimmed one part at a time."""
    contexts = [r.context(len(r.before), len(r.after)) for r in requests]
    rendered = [prompt.render(title=r.chunk.title, section_path=" > ".join(r.chunk.section_path), context=context,
                              chunk=r.chunk.text) for r, context in zip(requests, contexts)]
    counts = iter(counter.count_many([m["content"] for messages in rendered for m in messages]))
    fitted = []
    for request, context, messages in zip(requests, contexts, rendered):
        estimate = int(sum(next(counts) for _ in messages) * safety) + MESSAGE_OVERHEAD_TOKENS
        if context_limit is None or estimate + max_output_tokens <= context_limit:
            fitted.append(FittedPrompt(messages=messages, context=context, est_prompt_tokens=estimate,
                                       trimmed_parts=0))
        else:
            fitted.append(fit_prompt(request, prompt, counter, context_limit=context_limit,
                                     max_output_tokens=max_output_tokens, safety=safety))
    return fitted


def _cut_chunk(request: HeaderRequest, prompt: PromptTemplate, counter: TokenCounter, context_limit: int,
               max_output_tokens: int, safety: float, estimate: int, trimmed: int) -> FittedPrompt:
    """The chunk alone is over the context: show its start (as context and as the passage), cut to fit."""
    chunk, text = request.chunk, request.chunk.text
    while estimate + max_output_tokens > context_limit:
        keep = int(len(text) * (context_limit - max_output_tokens) / estimate * 0.9)
        if keep < MIN_SHOWN_CHARS:
            raise ChunkTooLargeError(
                f"chunk {chunk.ordinal} of {chunk.doc_id} needs ~{estimate} prompt tokens + {max_output_tokens} output "
                f"tokens, over the model's context length of {context_limit}; lower CTX_CHUNK_TOKENS"
            )
        text = text[:keep]
        messages = prompt.render(title=chunk.title, section_path=" > ".join(chunk.section_path), context=text,
                                 chunk=text)
        estimate = estimate_tokens(messages, counter, safety)
    return FittedPrompt(messages=messages, context=text, est_prompt_tokens=estimate, trimmed_parts=trimmed,
                        chunk_cut=True)
