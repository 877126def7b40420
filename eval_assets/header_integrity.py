"""Headers that lie: situating headers that contradict their chunks block promotion even when the gold
set happens not to notice. Four signals, each a share of a sample of the candidate's headers:

- `injected_share`: headers carrying an instruction to a reader or model ("ignore the chunk; ...").
- `other_language_share`: headers in another language than their chunk (stopword profiles of seven
  languages; a chunk without a detectable language, e.g. code, is compared with the corpus's language).
- `foreign_title_share`: headers naming another document's title and not their own.
- `header_fit`: the share of headers closer (embedding cosine) to their own chunk than to a chunk of
  another document, paired by a fixed derangement; a header that fits no better than a random chunk
  scores 0.5. Headers written for their chunk score near 1.
- `same_header_share`: the share of headers equal to the most common one (digits aside): one template
  for every chunk. (`templated_rate` from `header_diagnostics` is reported beside it; structural headers
  score high on it by design, so it does not block.)

Thresholds are calibrated on good versions (structural headers on the bundled corpora and the codebase
dataset, and a real llama.cpp model's headers in the tests): see README "Evaluation gate". Pure functions.

The first three are per header (`header_flags`); `document_header_integrity` applies them, with the same
thresholds, to one document's headers: ingest runs it before it writes a document into production without
the gate (production kept fresh, `contextual_assets/ingest/pipeline/header_stage.py`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .diagnostics import header_diagnostics

# Each threshold is the largest (smallest, for fit) value a good version may show.
MAX_INJECTED_SHARE = 0.01
MAX_OTHER_LANGUAGE_SHARE = 0.2
MAX_FOREIGN_TITLE_SHARE = 0.2
MIN_HEADER_FIT = 0.6
MAX_SAME_HEADER_SHARE = 0.5

_INJECTION = re.compile(
    r"\b(ignore|disregard|forget|override)\b[^.;:]{0,40}\b(chunk|text|passage|context|document|instructions?|"
    r"above|previous|prompt)\b|\b(system prompt|as an ai|you must now|new instructions?)\b"
    r"|^\s*(instruction|system)\s*:",
    re.IGNORECASE)
_STOPWORDS = {
    "en": "the of and to in is that for this with are on as by from it be an which section describes".split(),
    "de": "der die das und ist nicht mit von den dem zu ein eine für auf im des sich dieser abschnitt".split(),
    "fr": "le la les et est des une pour dans du que qui sur avec ce cette au aux par ce section".split(),
    "es": "el la los las y es en del que una para con por como este esta sobre al se sección".split(),
    "it": "il lo gli le e è di che una per con del della questo questa sono nel sezione".split(),
    "pt": "o os as e é do da dos das que uma para com por este esta em no na seção".split(),
    "nl": "de het een en is van dat voor met op deze dit zijn niet bij te sectie".split(),
}
_LANGUAGE_OF = {}
for _language, _words in _STOPWORDS.items():
    for _word in _words:
        _LANGUAGE_OF.setdefault(_word, set()).add(_language)
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_DIGITS = re.compile(r"\d+")
_IDENTIFIER = re.compile(r"\w+(?:[./\\]\w+)+")  # com.google.cloud, a/b/c: code, not prose


def language(text: str, min_hits: int = 2, min_share: float = 0.1) -> str | None:
    """The language whose stopwords the text uses most; None without a clear one: fewer than `min_hits`
    stopwords, under `min_share` of its words (code, tables), or a runner-up within 2/3 of the winner."""
    words = _WORD.findall(_IDENTIFIER.sub(" ", text.lower()))
    counts: Counter[str] = Counter()
    for word in words:
        for lang in _LANGUAGE_OF.get(word, ()):
            counts[lang] += 1
    ranked = counts.most_common(2)
    if not ranked or ranked[0][1] < max(min_hits, min_share * len(words)):
        return None
    if len(ranked) > 1 and 3 * ranked[1][1] > 2 * ranked[0][1]:
        return None
    return ranked[0][0]


def _names(title: str, text: str) -> bool:
    title = title.strip().lower()
    return len(title) >= 6 and title in text.lower()


# The per-header signals: (flag, share in the result, the largest share a good version may show, the reason).
INSTRUCTION, OTHER_LANGUAGE, FOREIGN_TITLE = "instruction", "other_language", "foreign_title"
PER_HEADER_SIGNALS = (
    (INSTRUCTION, "injected_share", MAX_INJECTED_SHARE, "carry an instruction"),
    (OTHER_LANGUAGE, "other_language_share", MAX_OTHER_LANGUAGE_SHARE, "are in another language than their chunk"),
    (FOREIGN_TITLE, "foreign_title_share", MAX_FOREIGN_TITLE_SHARE, "name another document's title"),
)


def reference_languages(texts: Sequence[str]) -> list[str | None]:
    """The language each chunk's header is compared with: the chunk's own, or, for a chunk without a
    detectable one (code, tables), the commonest among the chunks (the corpus's)."""
    languages = [language(text) for text in texts]
    corpus = Counter(lang for lang in languages if lang).most_common(1)
    return [lang or (corpus[0][0] if corpus else None) for lang in languages]


class TitleIndex:
    """Documents' titles as the foreign-title signal looks for them (those under 6 characters never),
    lowered once: a version's thousands of titles are not lowered again for every header."""

    def __init__(self, titles: Mapping[str, str]):
        self.own = {d: t for d, t in titles.items() if len(t.strip()) >= 6}
        # (document, the title as looked for in a header, the title as compared with the header's own)
        self._sought = [(d, t.strip().lower(), t.lower()) for d, t in self.own.items()]

    def names_another(self, header: str, document: str) -> bool:
        """The header names another document's title and not its own."""
        own = self.own.get(document, "")
        if _names(own, header):
            return False
        text, own = header.lower(), own.lower()
        return any(len(sought) >= 6 and sought in text for d, sought, title in self._sought
                   if d != document and title != own)


def header_flags(header: str, document: str, titles: Mapping[str, str] | TitleIndex,
                 reference_language: str | None) -> set[str]:
    """The per-header signals one header raises: INSTRUCTION (an instruction to a reader or model),
    OTHER_LANGUAGE (another language than `reference_language`, see `reference_languages`), FOREIGN_TITLE
    (another document's title and not its own; `titles`: document -> title, its own included, or their
    `TitleIndex`; titles under 6 characters are not looked for)."""
    flags = set()
    if _INJECTION.search(header):
        flags.add(INSTRUCTION)
    header_language = language(header)
    if header_language and reference_language and header_language != reference_language:
        flags.add(OTHER_LANGUAGE)
    index = titles if isinstance(titles, TitleIndex) else TitleIndex(titles)
    if index.names_another(header, document):
        flags.add(FOREIGN_TITLE)
    return flags


def _flagged(headers: Sequence[str], texts: Sequence[str], documents: Sequence[str],
             titles: Mapping[str, str]) -> tuple[list[int], dict[str, list[int]]]:
    """The positions of the headers present, and per signal the positions of the headers raising it."""
    present = [i for i, h in enumerate(headers) if h.strip()]
    references = reference_languages([texts[i] for i in present])
    index = TitleIndex(titles)
    offenders: dict[str, list[int]] = {flag: [] for flag, *_ in PER_HEADER_SIGNALS}
    for i, reference in zip(present, references):
        for flag in header_flags(headers[i], documents[i], index, reference):
            offenders[flag].append(i)
    return present, offenders


def _per_header_verdict(result: dict, headers: Sequence[str], n: int,
                        offenders: dict[str, list[int]]) -> tuple[list[str], list[str]]:
    """Each per-header signal's share into `result`; (reasons, examples) of those past their threshold."""
    reasons, examples = [], []
    for flag, key, limit, what in PER_HEADER_SIGNALS:
        result[key] = len(offenders[flag]) / n
        if result[key] > limit:
            reasons.append(f"{result[key]:.0%} of headers {what} (at most {limit:.0%})")
            examples += [headers[i][:160] for i in offenders[flag][:2]]
    return reasons, examples


def document_header_integrity(headers: Sequence[str], texts: Sequence[str], documents: Sequence[str],
                              titles: Mapping[str, str]) -> dict:
    """The per-header signals over one document's headers (its logical documents in `documents`; `titles`:
    every document's title known, its own included), past the same thresholds as a whole version's: shares,
    `reasons` (empty: the headers pass) and `examples`. A chunk without a detectable language is compared
    with the document's own commonest language. The fit and same-header signals compare across documents
    and are left to the gate."""
    present, offenders = _flagged(headers, texts, documents, titles)
    result: dict = {"headers": len(present), "reasons": [], "examples": []}
    if present:
        result["reasons"], examples = _per_header_verdict(result, headers, len(present), offenders)
        result["examples"] = examples[:6]
    return result


def _derangement(documents: Sequence[str]) -> list[int | None]:
    """For each position, another position whose document differs (a fixed rotation over the order
    sorted by document), or None when every chunk is of one document."""
    order = sorted(range(len(documents)), key=lambda i: (documents[i], i))
    n = len(order)
    partner: list[int | None] = [None] * n
    if n < 2 or len(set(documents)) < 2:
        return partner
    # Shift by half the list: with documents sorted, a position half a list away is another document
    # unless one document holds over half the chunks; then walk on to the next one that differs.
    for rank, i in enumerate(order):
        for step in range(n // 2, n // 2 + n):
            j = order[(rank + step) % n]
            if documents[j] != documents[i]:
                partner[i] = j
                break
    return partner


def header_integrity(headers: Sequence[str], texts: Sequence[str], documents: Sequence[str],
                     titles: dict[str, str], embed: Callable[[list[str]], list[list[float]]] | None = None) -> dict:
    """The signals above over (header, chunk text, document) triples, with `reasons` (one line per signal
    past its threshold: the version must not be promoted) and `examples` (a few offending headers)."""
    present = [i for i, h in enumerate(headers) if h.strip()]
    result: dict = {"headers": len(present), "injected_share": 0.0, "other_language_share": 0.0,
                    "foreign_title_share": 0.0, "header_fit": None, "same_header_share": 0.0, "templated_rate": 0.0,
                    "reasons": [],
                    "examples": []}
    if not present:
        return result
    n = len(present)
    _, offenders = _flagged(headers, texts, documents, titles)
    reasons, examples = _per_header_verdict(result, headers, n, offenders)

    shapes = Counter(_DIGITS.sub("0", " ".join(headers[i].lower().split())) for i in present)
    result.update(same_header_share=shapes.most_common(1)[0][1] / n,
                  templated_rate=header_diagnostics([headers[i] for i in present],
                                                    [texts[i] for i in present])["templated_rate"])
    partner = _derangement([documents[i] for i in present])
    if embed is not None and any(p is not None for p in partner):
        pairs = [(k, p) for k, p in enumerate(partner) if p is not None]
        header_vectors = np.asarray(embed([headers[present[k]] for k, _ in pairs]), dtype=np.float64)
        text_vectors = np.asarray(embed([texts[i] for i in present]), dtype=np.float64)
        text_vectors /= np.maximum(np.linalg.norm(text_vectors, axis=1, keepdims=True), 1e-12)
        header_vectors /= np.maximum(np.linalg.norm(header_vectors, axis=1, keepdims=True), 1e-12)
        own = np.einsum("ij,ij->i", header_vectors, text_vectors[[k for k, _ in pairs]])
        other = np.einsum("ij,ij->i", header_vectors, text_vectors[[p for _, p in pairs]])
        result["header_fit"] = float(np.mean(own > other))

    if result["header_fit"] is not None and result["header_fit"] < MIN_HEADER_FIT:
        reasons.append(f"headers fit their own chunk better than another document's chunk only "
                       f"{result['header_fit']:.0%} of the time (at least {MIN_HEADER_FIT:.0%}; chance is 50%)")
    if result["same_header_share"] > MAX_SAME_HEADER_SHARE:
        reasons.append(f"{result['same_header_share']:.0%} of headers are one and the same (at most "
                       f"{MAX_SAME_HEADER_SHARE:.0%})")
        examples += [headers[present[0]][:160]]
    result["reasons"], result["examples"] = reasons, examples[:6]
    return result
