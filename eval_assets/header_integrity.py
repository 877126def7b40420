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
dataset, and a real llama.cpp model's headers in the tests): see README "Evaluation gate". Pure functions."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

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
    injected = [i for i in present if _INJECTION.search(headers[i])]

    chunk_languages = {i: language(texts[i]) for i in present}
    header_languages = {i: language(headers[i]) for i in present}
    corpus = Counter(lang for lang in chunk_languages.values() if lang).most_common(1)
    corpus_language = corpus[0][0] if corpus else None
    other_language = [i for i in present if header_languages[i] and (chunk_languages[i] or corpus_language)
                      and header_languages[i] != (chunk_languages[i] or corpus_language)]

    own_titles = {d: t for d, t in titles.items() if len(t.strip()) >= 6}

    def names_another(i: int) -> bool:
        own = own_titles.get(documents[i], "")
        return not _names(own, headers[i]) and any(
            _names(t, headers[i]) for d, t in own_titles.items() if d != documents[i] and t.lower() != own.lower())

    foreign_title = [i for i in present if names_another(i)]

    shapes = Counter(_DIGITS.sub("0", " ".join(headers[i].lower().split())) for i in present)
    result.update(same_header_share=shapes.most_common(1)[0][1] / n, injected_share=len(injected) / n,
                  other_language_share=len(other_language) / n, foreign_title_share=len(foreign_title) / n,
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

    reasons, examples = [], []
    for share, limit, what, offenders in (
            (result["injected_share"], MAX_INJECTED_SHARE, "carry an instruction", injected),
            (result["other_language_share"], MAX_OTHER_LANGUAGE_SHARE, "are in another language than their chunk",
             other_language),
            (result["foreign_title_share"], MAX_FOREIGN_TITLE_SHARE, "name another document's title", foreign_title)):
        if share > limit:
            reasons.append(f"{share:.0%} of headers {what} (at most {limit:.0%})")
            examples += [headers[i][:160] for i in offenders[:2]]
    if result["header_fit"] is not None and result["header_fit"] < MIN_HEADER_FIT:
        reasons.append(f"headers fit their own chunk better than another document's chunk only "
                       f"{result['header_fit']:.0%} of the time (at least {MIN_HEADER_FIT:.0%}; chance is 50%)")
    if result["same_header_share"] > MAX_SAME_HEADER_SHARE:
        reasons.append(f"{result['same_header_share']:.0%} of headers are one and the same (at most "
                       f"{MAX_SAME_HEADER_SHARE:.0%})")
        examples += [headers[present[0]][:160]]
    result["reasons"], result["examples"] = reasons, examples[:6]
    return result
