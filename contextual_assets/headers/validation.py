"""Every generated header is checked before it is embedded: never a silent bad header."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from functools import lru_cache

from ..errors import HeaderGenerationError

# A sentence ends at . ! ? (or their CJK/Arabic forms) before a space or the end, but not after a common
# abbreviation ("e.g. the fee", "Sec. 4", "Dr. Smith"): those are one sentence.
_SENTENCE_END = re.compile(
    r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<!\bSec)(?<!\bsec)(?<!\bFig)(?<!\bNo)(?<!\bno)(?<!\bDr)(?<!\bMr)"
    r"(?<!\bSt)[.!?。؟](?:\s|$)")
_WORD = re.compile(r"\w+")
REPEAT_JACCARD = 0.7  # a second sentence sharing this share of its words with the first says nothing new
# A run of REPEAT_NGRAM words said REPEAT_TIMES times in one header is a loop, not a description (said
# twice it can be a title quoted twice: redundant, not broken).
REPEAT_NGRAM = 4
REPEAT_TIMES = 3
# A header sharing this many consecutive words with the prompt's own instructions is the prompt echoed
# (a base model continuing its input), never a description: a sound header shares a few ("of this document").
ECHO_WORDS = 8
# Words that situate nothing: a header made of these alone ("This passage", "The passage is about the
# passage.") names nothing of the passage; a header must name at least MIN_CONTENT_WORDS other words.
_GENERIC_WORDS = frozenset(
    "a an the this that these those it its is are was be of in on at to from for and or by with about as "
    "which what where who passage passages section sections document documents chunk chunks text part here "
    "above below sits describes discusses covers explains contains talks".split())
MIN_CONTENT_WORDS = 2
_TAG = re.compile(r"<[^<>]{0,40}>")
# The prompt's own markup: its opening tags with their attributes, its closing tags, or document
# text as the prompt escapes it. A header holding one is the model echoing its prompt (or a
# document's instructions), never a description of the passage. (A bare "<chunk>" in an otherwise
# sound sentence is tolerated: small models write it when they mean "this passage".)
_PROMPT_MARKUP = re.compile(
    r"<\s*document\s+title\b|<\s*chunk\s+id\b|<\s*/\s*(?:document|chunk)\s*>|&lt;\s*/?\s*(?:document|chunk)\b",
    re.IGNORECASE,
)


class HeaderValidationError(HeaderGenerationError):
    pass


def clean_header(raw: str) -> str:
    # A header is one paragraph: an answer ends at its first blank line (small models go on with
    # markup, references or another answer after it).
    text = re.split(r"\n\s*\n", raw.strip(), maxsplit=1)[0]
    text = text.strip().strip('"').strip()
    # Small models like to prefix their answer; strip common lead-ins.
    text = re.sub(r"^(?:header|answer|context|sentence)\s*:\s*", "", text, flags=re.IGNORECASE)
    return " ".join(text.split())


def leading_sentences(text: str, max_sentences: int = 2) -> str:
    """The first complete sentences of a text (models often write a good sentence, then ramble or
    get cut off by the output-token limit)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text + " ")]
    if not ends:
        return ""
    return text[: ends[min(max_sentences, len(ends)) - 1]].strip()


def _sentences(text: str) -> list[str]:
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text + " ")]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:]) if text[a:b].strip()]


def repeats_itself(text: str) -> bool:
    """Its second sentence says the first again (small models loop: "It is about X. It is about X.")."""
    sentences = _sentences(text)
    if len(sentences) < 2:
        return False
    first, second = ({w.lower() for w in _WORD.findall(s)} for s in sentences[:2])
    return bool(first and second) and len(first & second) / len(first | second) >= REPEAT_JACCARD


def repeated_phrase(text: str) -> str | None:
    """A run of REPEAT_NGRAM words that occurs REPEAT_TIMES times, if any."""
    words = [w.lower() for w in _WORD.findall(text)]
    seen: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - REPEAT_NGRAM + 1):
        gram = tuple(words[i:i + REPEAT_NGRAM])
        seen[gram] = seen.get(gram, 0) + 1
        if seen[gram] == REPEAT_TIMES:
            return " ".join(gram)
    return None


def _word_runs(text: str) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i:i + ECHO_WORDS]) for i in range(len(words) - ECHO_WORDS + 1)}


@lru_cache(maxsize=16)
def _instruction_runs(instructions: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    """Each part's runs of ECHO_WORDS words (never across a placeholder), once per prompt."""
    return frozenset(run for part in instructions for run in _word_runs(part))


def echoed_instruction(text: str, instructions: tuple[str, ...]) -> str | None:
    """A run of ECHO_WORDS words of `text` found in one part of the prompt's instructions, if any."""
    echoed = sorted(_word_runs(text) & _instruction_runs(instructions))
    return " ".join(echoed[0]) if echoed else None


def validate_header(header: str, chunk_text: str, *, max_tokens: int, count_tokens, salvage: bool = False,
                    instructions: tuple[str, ...] = ()) -> str:
    """Return the cleaned header or raise HeaderValidationError with the reason.

    With `salvage`, an answer that is too long, has too many sentences or repeats its first sentence is
    cut to its leading complete sentences when those pass every check; an answer with no complete
    sentence is not. `instructions`: the prompt's own text (`PromptTemplate.instructions`), which a header
    must not echo.
    """
    text = clean_header(header)
    if not text:
        raise HeaderValidationError("empty header")
    if salvage:
        for sentences in (2, 1):
            candidate = leading_sentences(text, sentences)
            if sentences == 2 and repeats_itself(candidate):
                continue
            if candidate and count_tokens(candidate) <= max_tokens:
                if candidate != text:
                    text = candidate
                break
    if _PROMPT_MARKUP.search(text):
        raise HeaderValidationError("header contains the prompt's <document>/<chunk> markup (an echoed prompt)")
    echoed = echoed_instruction(text, instructions)
    if echoed is not None:
        raise HeaderValidationError(f"header repeats the prompt's instructions ('{echoed}')")
    if len(_WORD.findall(_TAG.sub(" ", text))) < 2:
        raise HeaderValidationError("header is markup, not a sentence")
    if len([w for w in _WORD.findall(text) if w.lower() not in _GENERIC_WORDS]) < MIN_CONTENT_WORDS:
        raise HeaderValidationError("header names nothing of the passage (only words like 'this passage')")
    tokens = count_tokens(text)
    if tokens > max_tokens:
        raise HeaderValidationError(f"header has {tokens} tokens, over the limit of {max_tokens}")
    sentences = len(_SENTENCE_END.findall(text + " "))
    if sentences > 2:
        raise HeaderValidationError(f"header has {sentences} sentences; one or two are allowed")
    if repeats_itself(text):
        raise HeaderValidationError("header repeats its first sentence")
    phrase = repeated_phrase(text)
    if phrase is not None:
        raise HeaderValidationError(f"header repeats the phrase '{phrase}'")
    normalised_chunk = " ".join(chunk_text.split()).lower()
    normalised_header = text.lower()
    if len(normalised_header) >= 30 and normalised_header in normalised_chunk:
        raise HeaderValidationError("header copies the chunk text")
    if SequenceMatcher(None, normalised_header, normalised_chunk[: len(normalised_header) * 2]).ratio() > 0.9:
        raise HeaderValidationError("header copies the chunk text")
    return text
