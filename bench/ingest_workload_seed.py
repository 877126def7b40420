"""bench.ingest's seed workload (`--workload seed`): long PDFs with an outline and headings."""

from __future__ import annotations

from pathlib import Path

from bench.ingest_workload_text import TOPICS, sentence


def build_seed(dest: Path, documents: int = 5, sections: int = 14, paragraphs: int = 10) -> list[Path]:
    """Long PDFs with an outline and headings: `sections` sections of `paragraphs` paragraphs each
    (~140 chunks per document at 200 tokens a chunk)."""
    import random

    import pymupdf

    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(documents):
        rng = random.Random(1000 + d)
        doc = pymupdf.open()
        toc = []
        page = doc.new_page()
        y = 72.0

        def write(text: str, size: float, font: str) -> None:
            nonlocal page, y
            box_height = 14 + size * 1.3 * (len(text) // int(900 / size) + 1)
            if y + box_height > 780:
                page = doc.new_page()
                y = 72.0
            rect = pymupdf.Rect(72, y, 523, y + box_height)
            page.insert_textbox(rect, text, fontsize=size, fontname=font)
            y += box_height

        for s in range(sections):
            topic = TOPICS[(d + s) % len(TOPICS)]
            title = f"{s + 1}. {topic.capitalize()} {rng.choice(['procedure', 'terms', 'controls', 'requirements'])}"
            if y > 600:
                page = doc.new_page()
                y = 72.0
            toc.append([1, title, doc.page_count])
            write(title, 15, "hebo")
            for _ in range(paragraphs):
                write(" ".join(sentence(rng, topic, rng.randint(14, 22)) for _ in range(7)), 10, "helv")
        doc.set_toc(toc)
        path = dest / f"operations_manual_{d + 1:02d}.pdf"
        doc.save(path, garbage=3, deflate=True)
        doc.close()
        paths.append(path)
    return paths
