"""A stratified within-section needle set: planted facts that only one chunk can answer.

`build_needle_set` parses each source document, writes a Markdown copy of it to
`dest/<stem>.needles.md` (headings rebuilt from the section paths, one paragraph per parsed
block) and plants generated fact sentences inside long sections. Each fact is a sentence of its
own *inside an existing paragraph*, so the chunk that holds it also holds the sibling text of the
section: retrieving it tests whether a system can find one detail among neighbours on the same
topic, which section-level questions do not.

Depth strata. A fact's stratum is where in its section it sits: "start", "middle" or "end".
When a section has three or more paragraphs the stratum is the third of its paragraphs the fact
lands in (paragraph p of P is in third floor(3p / P)); a section of one or two paragraphs has no
meaningful paragraph thirds, so there the stratum is the third of the section's words that precede
the fact. Needles rotate through the strata (each document starts one stratum further on, so the
set stays balanced overall); within a document the counts differ by at most one. If no qualifying
section has a free slot in the next stratum, the document gets fewer needles than asked.

Facts come from seeded templates (in `needle_facts`) with made-up places, equipment and codes
(for example "The maintenance code for the Bergen relay cabinet is QX-4471." asked as "What is the
maintenance code for the Bergen relay cabinet?"). Every fact, subject, answer and query is unique
across the set, and neither the subject nor the answer occurs in the source text. The same sources (in the same
order) and seed give the same files and tasks.

Limits of the Markdown copy: a PDF's metadata title is not carried over (`parse_markdown` takes the
first level-1 heading as the title), paths deeper than six levels are cut to six, and a block
without a section path that follows a heading (possible only in odd PDFs) lands in the section
above it. Every paragraph of the copy otherwise parses back to the same block with the same
section path, plus the planted sentences.

A task's notes read "section: <title> > <subtitle>; paragraph <p>/<P>; depth <fraction>";
`section_path_from_notes` reads the section path back.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from contextual_assets.parsing import parse_file
from contextual_assets.parsing.blocks import Block

from eval_assets.gold.gold_set import Evidence, GoldTask, normalise
from bench.needle_facts import FactMaker

__all__ = ["STRATA", "build_needle_set", "section_path_from_notes"]

STRATA = ("start", "middle", "end")
SECTION_SEPARATOR = " > "
_NOTES_PREFIX = "section: "

# Where the chunker splits sentences (contextual_assets.parsing.chunking._SENTENCE_END), restricted to
# boundaries followed by what starts a sentence, so a fact never lands after "Ms." or "e.g.".
_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_SENTENCE_START = re.compile(r"[\"'(\[]?[A-Z0-9]")
_TERMINAL = re.compile(r"[.!?][\"')\]]?$")
_ABBREVIATIONS = {
    "mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "no.", "nos.", "vs.", "etc.", "fig.", "inc.",
    "ltd.", "co.", "corp.", "art.", "sec.", "para.", "approx.", "cf.", "ca.", "jr.", "sr.",
}
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")
_ATX_LIKE = re.compile(r"^#{1,6}(\s|$)")
_FENCE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)
_MIN_PARAGRAPH_WORDS = 12
_PROSE_KINDS = ("pdf", "markdown", "text")
_MAX_HEADING_LEVEL = 6


# --------------------------------------------------------------------------------------------
# Sections, slots and strata
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    """A place inside a paragraph where a sentence may go: before character `offset` of block
    `block` (0 = paragraph start, len(text) = paragraph end)."""

    block: int
    offset: int
    paragraph: int  # index among the section's paragraphs
    depth: float  # share of the section's words before the slot
    stratum: str


@dataclass
class _Section:
    path: tuple[str, ...]
    blocks: list[int]
    words: int
    slots: list[_Slot] = field(default_factory=list)
    planted: int = 0


def _is_boundary(text: str, match: re.Match) -> bool:
    before = text[: match.start()].rsplit(None, 1)
    last = before[-1] if before else ""
    return last.lower() not in _ABBREVIATIONS and not _INITIALS.match(last)


def _paragraph_offsets(text: str, starts_sentence: bool) -> list[int]:
    """Offsets where a sentence may be inserted inside a paragraph of prose.

    The paragraph start only when the paragraph begins a sentence (a PDF paragraph cut by a page
    break may continue the previous one); the end only after terminal punctuation.
    """
    offsets = [0] if starts_sentence and _SENTENCE_START.match(text) else []
    offsets += [m.start() for m in _BOUNDARY.finditer(text) if _is_boundary(text, m)]
    if _TERMINAL.search(text.rstrip()):
        offsets.append(len(text.rstrip()))
    return sorted(set(offsets))


def _stratum(paragraph: int, paragraphs: int, depth: float) -> str:
    if paragraphs >= 3:
        return STRATA[min(2, 3 * paragraph // paragraphs)]
    return STRATA[min(2, int(3 * depth))]


def _sections(blocks: list[Block], min_words: int) -> list[_Section]:
    """Sections (consecutive or not, by path) with at least `min_words` words, and their slots."""
    by_path: dict[tuple[str, ...], _Section] = {}
    for index, block in enumerate(blocks):
        path = tuple(block.section_path)
        section = by_path.setdefault(path, _Section(path=path, blocks=[], words=0))
        section.blocks.append(index)
        section.words += len(block.text.split())
    chosen = []
    for section in by_path.values():
        if section.words < min_words:
            continue
        seen_words = 0
        count = len(section.blocks)
        for paragraph, index in enumerate(section.blocks):
            block = blocks[index]
            text = block.text
            previous = blocks[section.blocks[paragraph - 1]].text.rstrip() if paragraph else ""
            starts_sentence = not previous or bool(_TERMINAL.search(previous))
            eligible = (not block.is_code and not block.fixed_chunk and not _FENCE.search(text)
                        and len(text.split()) >= _MIN_PARAGRAPH_WORDS)
            if eligible:
                for offset in _paragraph_offsets(text, starts_sentence):
                    depth = (seen_words + len(text[:offset].split())) / section.words
                    section.slots.append(_Slot(index, offset, paragraph, depth, _stratum(paragraph, count, depth)))
            seen_words += len(text.split())
        if section.slots:
            chosen.append(section)
    return chosen


def _plan(sections: list[_Section], count: int, first_stratum: int, rng: random.Random) -> list[_Slot]:
    """Pick `count` slots rotating through the strata, spreading them over sections and paragraphs.

    Stops early (keeping the strata within one of each other) when the next stratum has no free slot.
    """
    order = list(range(len(sections)))
    rng.shuffle(order)
    rank = {s: r for r, s in enumerate(order)}
    used_blocks: set[int] = set()
    used_slots: set[tuple[int, int]] = set()
    plan: list[_Slot] = []
    for n in range(count):
        stratum = STRATA[(first_stratum + n) % len(STRATA)]
        best: tuple | None = None
        for position, section in enumerate(sections):
            free = [s for s in section.slots if s.stratum == stratum and (s.block, s.offset) not in used_slots]
            if not free:
                continue
            fresh = [s for s in free if s.block not in used_blocks]
            key = (section.planted, 0 if fresh else 1, rank[position])
            if best is None or key < best[0]:
                best = (key, section, fresh or free)
        if best is None:
            break
        _, section, candidates = best
        slot = rng.choice(candidates)
        section.planted += 1
        used_blocks.add(slot.block)
        used_slots.add((slot.block, slot.offset))
        plan.append(slot)
    return plan


# --------------------------------------------------------------------------------------------
# Writing the copy
# --------------------------------------------------------------------------------------------


def _insert(text: str, insertions: list[tuple[int, str]]) -> str:
    """Insert sentences at offsets (several may share one offset; they keep the given order)."""
    for offset, sentence in sorted(insertions, key=lambda item: item[0], reverse=True):
        head, tail = text[:offset].rstrip(), text[offset:].lstrip()
        text = " ".join(part for part in (head, sentence, tail) if part)
    return text


def _escape_heading_lines(text: str) -> str:
    """A paragraph line that looks like an ATX heading gets a leading space (the parser strips it)."""
    if _FENCE.search(text):
        return text
    return "\n".join(f" {line}" if _ATX_LIKE.match(line) else line for line in text.split("\n"))


def _markdown(blocks: list[Block], texts: list[str]) -> str:
    """Rebuild a Markdown document whose parse gives the same section paths, block by block."""
    out: list[str] = []
    previous: tuple[str, ...] = ()
    for block, text in zip(blocks, texts):
        path = tuple(block.section_path)[:_MAX_HEADING_LEVEL]
        if path != previous:
            common = 0
            while common < min(len(path), len(previous)) and path[common] == previous[common]:
                common += 1
            if common == len(path) and path:
                common -= 1  # back up to a parent section: reopen it with its own heading
            for level in range(common, len(path)):
                out.append(f"{'#' * (level + 1)} {' '.join(path[level].split())}")
            previous = path
        out.append(_escape_heading_lines(text.strip()))
    return "\n\n".join(out) + "\n"


def section_path_from_notes(notes: str) -> tuple[str, ...]:
    """The section path recorded in a needle task's notes."""
    first = notes.rsplit("; ", 2)[0]
    if not first.startswith(_NOTES_PREFIX):
        raise ValueError(f"not a needle note: {notes!r}")
    body = first[len(_NOTES_PREFIX):]
    return tuple(body.split(SECTION_SEPARATOR)) if body else ()


def build_needle_set(
    sources: list[Path],
    dest: Path,
    *,
    per_document: int = 6,
    min_section_words: int = 150,
    seed: int = 0,
) -> tuple[list[Path], list[GoldTask]]:
    """Write a needle-planted Markdown copy of each source and return (copies, needle tasks).

    For each source (a PDF, Markdown or plain-text file; code and pre-chunked JSON raise ValueError,
    as does a file stem shared by two sources) the copy goes
    to `dest/<stem>.needles.md`; up to `per_document` facts are planted in sections of at least
    `min_section_words` words, rotating through the depth strata. A document with no such section
    is still copied, without needles. Tasks have id `needle:<stem>:<n>` (n from 1), task_kind
    "needle", the depth stratum, the exact planted sentence as evidence (doc_id None) and notes
    naming the section path. Deterministic for the same sources (in the same order) and seed.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stems = [Path(s).stem for s in sources]
    duplicates = sorted({s for s in stems if stems.count(s) > 1})
    if duplicates:
        raise ValueError(f"sources share a file stem, so their copies would collide: {', '.join(duplicates)}")
    facts = FactMaker()
    copies: list[Path] = []
    tasks: list[GoldTask] = []
    for doc_index, source in enumerate(sources):
        source = Path(source)
        parsed, _ = parse_file(source)
        if not parsed.kind.startswith(_PROSE_KINDS):
            raise ValueError(f"{source}: needles are planted in prose (PDF, Markdown, text), not {parsed.kind}")
        blocks = parsed.blocks
        forbidden = normalise(" ".join(b.text + " " + " ".join(b.section_path) for b in blocks))
        rng = random.Random(f"needles:{seed}:{source.stem}")
        sections = _sections(blocks, min_section_words)
        plan = _plan(sections, per_document, doc_index % len(STRATA), rng)
        section_of = {index: section for section in sections for index in section.blocks}

        insertions: dict[int, list[tuple[int, str]]] = {}
        for n, slot in enumerate(plan, start=1):
            fact = facts.make(rng, forbidden)
            insertions.setdefault(slot.block, []).append((slot.offset, fact.sentence))
            section = section_of[slot.block]
            notes = (f"{_NOTES_PREFIX}{SECTION_SEPARATOR.join(section.path)}; "
                     f"paragraph {slot.paragraph + 1}/{len(section.blocks)}; depth {slot.depth:.2f}")
            tasks.append(GoldTask(
                id=f"needle:{source.stem}:{n}",
                query=fact.query,
                evidence=[Evidence(text=fact.sentence, doc_id=None)],
                task_kind="needle",
                stratum=slot.stratum,
                notes=notes,
            ))
        texts = [_insert(b.text, insertions.get(i, [])) for i, b in enumerate(blocks)]
        copy = dest / f"{source.stem}.needles.md"
        copy.write_text(_markdown(blocks, texts), encoding="utf-8", newline="\n")
        copies.append(copy)
    return copies, tasks
