"""The within-section needle set built from the sample corpus PDFs."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from contextual_assets.parsing import parse_file
from contextual_assets.parsing.chunking import chunk_blocks
from contextual_assets.parsing.tokens import token_counter
from contextual_assets.samples import write_sample_corpus
from eval_assets.gold.gold_set import normalise
from bench.needles import STRATA, build_needle_set, section_path_from_notes

PDFS = ("supply_agreement.pdf", "incident_postmortem.pdf", "employee_handbook.pdf")
PER_DOCUMENT = 6
# The sample handbook has no section of 150 words, so the tests use a lower bar to reach all three.
MIN_WORDS = 60


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    directory = tmp_path_factory.mktemp("needle-corpus")
    write_sample_corpus(directory)
    return [directory / name for name in PDFS]


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    dest = tmp_path_factory.mktemp("needles")
    copies, tasks = build_needle_set(corpus, dest, per_document=PER_DOCUMENT, min_section_words=MIN_WORDS, seed=3)
    return copies, tasks


def _stem(task) -> str:
    return task.id.split(":")[1]


def _copy_of(copies: list[Path], task) -> Path:
    return next(c for c in copies if c.name == f"{_stem(task)}.needles.md")


def test_copies_and_ids(built, corpus):
    copies, tasks = built
    assert [c.name for c in copies] == [f"{p.stem}.needles.md" for p in corpus]
    assert all(c.exists() for c in copies)
    assert Counter(_stem(t) for t in tasks) == {p.stem: PER_DOCUMENT for p in corpus}
    for stem in (p.stem for p in corpus):
        assert [t.id for t in tasks if _stem(t) == stem] == [f"needle:{stem}:{n}" for n in range(1, PER_DOCUMENT + 1)]
    for task in tasks:
        assert task.task_kind == "needle" and task.stratum in STRATA
        assert len(task.evidence) == 1 and task.evidence[0].doc_id is None
        assert task.query.endswith("?")


def test_deterministic_for_a_seed(built, corpus, tmp_path):
    copies, tasks = built
    again_copies, again = build_needle_set(
        corpus, tmp_path / "again", per_document=PER_DOCUMENT, min_section_words=MIN_WORDS, seed=3
    )
    assert [t.model_dump() for t in again] == [t.model_dump() for t in tasks]
    assert [c.read_bytes() for c in again_copies] == [c.read_bytes() for c in copies]
    _, other = build_needle_set(corpus, tmp_path / "other", per_document=PER_DOCUMENT, min_section_words=MIN_WORDS,
                                seed=4)
    assert {t.evidence[0].text for t in other} != {t.evidence[0].text for t in tasks}


def test_facts_are_unique_and_new(built, corpus):
    _, tasks = built
    sentences = [t.evidence[0].text for t in tasks]
    assert len(set(sentences)) == len(sentences)
    assert len({t.query for t in tasks}) == len(tasks)
    originals = {p.stem: normalise(" ".join(b.text for b in parse_file(p)[0].blocks)) for p in corpus}
    for task in tasks:
        sentence = task.evidence[0].text
        assert re.fullmatch(r"[A-Z][^.!?]*\.", sentence), sentence  # one plain sentence
        assert normalise(sentence) not in originals[_stem(task)]
        # The answer (the last words of the sentence) never occurs in the source.
        answer = sentence.rstrip(".").split()[-1]
        assert answer.lower() not in originals[_stem(task)], answer


def test_each_sentence_planted_exactly_once(built):
    copies, tasks = built
    texts = {c.name: c.read_text(encoding="utf-8") for c in copies}
    for task in tasks:
        sentence = task.evidence[0].text
        for name, text in texts.items():
            expected = 1 if name == _copy_of(copies, task).name else 0
            assert text.count(sentence) == expected, (task.id, name)
            assert normalise(text).count(normalise(sentence)) == expected


def test_strata_are_balanced_per_document(built, corpus):
    _, tasks = built
    overall = Counter(t.stratum for t in tasks)
    assert set(overall) == set(STRATA)
    for stem in (p.stem for p in corpus):
        counts = Counter(t.stratum for t in tasks if _stem(t) == stem)
        values = [counts.get(s, 0) for s in STRATA]
        assert max(values) - min(values) <= 1, (stem, counts)


def test_stratum_matches_position_in_section(built):
    _, tasks = built
    for task in tasks:
        match = re.search(r"paragraph (\d+)/(\d+); depth ([0-9.]+)$", task.notes)
        assert match, task.notes
        paragraph, paragraphs, depth = int(match[1]) - 1, int(match[2]), float(match[3])
        if paragraphs >= 3:  # thirds of the section's paragraphs
            expected = {STRATA[min(2, 3 * paragraph // paragraphs)]}
        else:  # thirds of the section's words (the notes round the depth to two decimals)
            expected = {STRATA[min(2, int(3 * max(0.0, d)))] for d in (depth - 0.005, depth + 0.005)}
        assert task.stratum in expected, task.notes


def test_copies_keep_the_section_structure(built, corpus):
    copies, tasks = built
    for source, copy in zip(corpus, copies):
        original = parse_file(source)[0].blocks
        parsed = parse_file(copy)[0]
        assert parsed.kind == "markdown"
        assert [b.section_path for b in parsed.blocks] == [b.section_path for b in original]
        planted = [t.evidence[0].text for t in tasks if _stem(t) == source.stem]
        for before, after in zip(original, parsed.blocks):
            text = after.text
            for sentence in planted:
                if sentence in text:
                    assert normalise(text) != normalise(sentence), "a fact must sit inside a paragraph"
                    text = text.replace(sentence, "")
            assert normalise(text) == normalise(before.text), "only the facts were added"


def test_each_needle_is_in_exactly_one_chunk_of_its_section(built):
    copies, tasks = built
    counter = token_counter()
    chunks_of: dict[str, list] = {}
    for copy in copies:
        parsed = parse_file(copy)[0]
        chunks_of[copy.name] = chunk_blocks(copy.stem, parsed, counter, 200)
    for task in tasks:
        chunks = chunks_of[_copy_of(copies, task).name]
        holding = [c for c in chunks if task.satisfied_by(c.text)]
        assert len(holding) == 1, (task.id, len(holding))
        assert {tuple(c.section_path) for c in holding} == {section_path_from_notes(task.notes)}
        chunk = normalise(holding[0].text)
        assert len(chunk) > len(normalise(task.evidence[0].text)) + 40, "the chunk holds sibling text"
        # Nothing outside the needle's own copy answers it.
        for name, others in chunks_of.items():
            if name != _copy_of(copies, task).name:
                assert not any(task.satisfied_by(c.text) for c in others)


def test_default_threshold_plants_only_in_long_sections(corpus, tmp_path):
    copies, tasks = build_needle_set(corpus, tmp_path, seed=0)
    assert len(copies) == 3 and all(c.exists() for c in copies)  # the handbook is still copied
    words: dict[tuple[str, tuple[str, ...]], int] = Counter()
    for source in corpus:
        for block in parse_file(source)[0].blocks:
            words[(source.stem, tuple(block.section_path))] += len(block.text.split())
    assert tasks, "the agreement and the post-mortem each have a section of 150 words"
    for task in tasks:
        assert words[(_stem(task), section_path_from_notes(task.notes))] >= 150
    assert not [t for t in tasks if _stem(t) == "employee_handbook"]


def test_markdown_source_and_stem_collision(tmp_path):
    paths = write_sample_corpus(tmp_path / "corpus")
    markdown = next(p for p in paths if p.suffix == ".md")
    copies, tasks = build_needle_set([markdown], tmp_path / "out", per_document=3, min_section_words=50)
    assert len(tasks) == 3
    original = parse_file(markdown)[0]
    copy = parse_file(copies[0])[0]
    assert copy.title == original.title
    assert [b.section_path for b in copy.blocks] == [b.section_path for b in original.blocks]
    assert "```" in copies[0].read_text(encoding="utf-8"), "the fenced code block survives"
    twin = tmp_path / "corpus" / f"{markdown.stem}.txt"
    twin.write_text("Plain text.\n", encoding="utf-8")
    with pytest.raises(ValueError):
        build_needle_set([markdown, twin], tmp_path / "out2")
    code = next(p for p in paths if p.suffix == ".py")
    with pytest.raises(ValueError):
        build_needle_set([code], tmp_path / "out3")
