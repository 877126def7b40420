"""Answer-text helpers of the fleet simulator (bench/sim/fleet.py): canned answers, embedding vectors
and the word-overlap relevance proxy.

Outputs: the natural output length of a request is deterministic from a hash of its prompt (per
chunk in batch mode): lognormal with mean ``output_tokens_mean`` and sigma 0.5 (median 0.88x the mean,
90 % between 0.39x and 2x, at most 8x; legacy: +- 20 %), never below the number of words of the
content, capped by ``max_tokens`` (or ``max_completion_tokens``; default: the room left in the
context). ``usage.completion_tokens`` is that simulated count (a subword tokenizer yields more tokens
than words); when the cap is below the content's word count the content is cut to that many words
and ``finish_reason`` is ``"length"``, else ``"stop"``. The content is one sentence::

    This passage (ref 3f9a2c) covers <first five words of the <chunk> or the last user message>
    in <document title if present>.

Batch mode (``response_format`` json_object / json_schema, or ``Answer as JSON`` in the last user
message) answers ``{"headers": [{"id": ..., "header": ...}, ...]}`` with one entry per
``<chunk id="...">`` element (of the last user message, else of the whole prompt; chunks without an
id get their ordinal as a string).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from typing import Any

_CHUNK_RE = re.compile(r"<chunk(?P<attrs>[^>]*)>(?P<body>.*?)</chunk>", re.DOTALL)
_ID_RE = re.compile(r"""\bid\s*=\s*["']([^"']*)["']""")
_TITLE_RE = re.compile(r"""<document[^>]*\btitle\s*=\s*"([^"]*)\"""")
_WORD_CLEAN = re.compile(r"[^\w\-']+")
_ALNUM_RUN = re.compile(r"[^\W_]+")  # letters and digits; underscores split identifiers
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # diff|Executor, HTTP|Server
_STOPWORDS = frozenset({
    "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "has", "have", "how", "in",
    "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "what", "when", "where", "which",
    "who", "why", "will", "with"})
_BREVITY_WEIGHT = 0.1  # < 1: brevity orders documents with equal hits, never outweighs one more hit


# --------------------------------------------------------------------------------------------
# Helpers


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def prompt_text(messages: list) -> tuple[str, str]:
    """(prompt, last user message's text): the prompt is ``role + " " + content`` of every message
    (entries that are not objects skipped), one a line."""
    parts, last_user = [], ""
    for message in messages:
        if not isinstance(message, dict):
            continue
        text = _message_text(message.get("content"))
        parts.append(f"{message.get('role', '')} {text}")
        if message.get("role") == "user":
            last_user = text
    return "\n".join(parts), last_user


def _clean_words(text: str, n: int) -> list[str]:
    words = []
    for raw in text.split():
        word = _WORD_CLEAN.sub("", raw)[:16]  # long identifiers would make a real header overlong
        if word:
            words.append(word)
            if len(words) == n:
                break
    return words


def header_sentence(subject_text: str, title: str | None, key: str) -> str:
    """The canned header: one sentence, under 40 words, deterministic in (subject_text, title, key)."""
    ref = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest()
    subject = " ".join(_clean_words(subject_text, 5)) or "this material"
    sentence = f"This passage (ref {ref}) covers {subject}"
    title_words = _clean_words(title or "", 8)
    if title_words:
        sentence += " in " + " ".join(title_words)
    return sentence + "."


def embedding_vector(text: str, dim: int = 32) -> list[float]:
    rng = random.Random(int.from_bytes(_digest(text), "big"))
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def content_words(text: str) -> set[str]:
    """The distinct content words of a text for ``relevance``: lowercased runs of letters and digits,
    identifiers also split at underscores and camelCase humps (``DiffExecutor`` -> diff, executor),
    without one-character words and a few English stopwords (they would match almost any document)."""
    words = set()
    for run in _ALNUM_RUN.findall(text):
        for part in _CAMEL_HUMP.split(run):
            word = part.lower()
            if len(word) > 1 and word not in _STOPWORDS:
                words.add(word)
    return words


def relevance(query: str, document: str) -> float:
    """A deterministic stand-in for a cross-encoder's relevance score, in [0, 1].

    ``(hits + w * brevity) / (wanted + w)`` with ``wanted`` the query's distinct content words, ``hits``
    those found in the document, ``brevity = 64 / (64 + document tokens)`` in (0, 1] and w = 0.1:
    essentially the share of the query's words the document covers. Since w * brevity < 1, one more
    hit always wins, so a document with all the query's words outscores one with half of them at any
    length; among equal hits the shorter (more focused) document wins, so scores rarely tie."""
    wanted = content_words(query)
    hits = len(wanted & content_words(document))
    brevity = 64 / (64 + len(document.split()))
    return (hits + _BREVITY_WEIGHT * brevity) / (len(wanted) + _BREVITY_WEIGHT)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)

