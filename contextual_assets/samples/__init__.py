"""A small, realistic sample corpus for demos and tests.

`make demo` ingests this corpus so the whole pipeline (parsing, chunking, situating headers,
embedding, hybrid search) can be exercised without any private documents, and the test-suite
uses it as a known input whose structure and facts are fixed by the data files here:

* ``corpus/``: the Markdown, Python and plain-text documents, copied out verbatim (the ``.py``
  file is a sample document, not part of this package);
* ``pdfs/``: one YAML spec per PDF (metadata and sections), typeset by `typeset.write_pdf`;
  the numeric file-name prefix fixes the order in which the PDFs are written;
* ``gold.jsonl``: the sample queries in the native gold format, each with a verbatim evidence
  span from the one document that answers it.

The corpus covers each kind of source the parsers handle: three PDFs with a two-level outline
(a supply contract, a database post-mortem, an employee handbook), one PDF without an outline
whose headings can only be recognised by font size and weight, a Markdown file whose fenced code
holds lines starting with ``#``, a Python module with a docstring, functions and two classes, and
a plain-text file whose paragraphs are separated by blank lines.
"""

from __future__ import annotations

import json
from importlib.resources import as_file, files
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from contextual_assets.samples.typeset import SamplePdf, write_pdf

__all__ = ["SAMPLE_QUERIES", "sample_gold_file", "write_sample_corpus"]

_DATA = files(__name__)


def _data_files(folder: str, suffix: str = "") -> list[Traversable]:
    """Files of a data folder in name order, skipping hidden files and ``__pycache__``."""
    entries = (_DATA / folder).iterdir()
    found = [e for e in entries if e.is_file() and not e.name.startswith(".") and e.name.endswith(suffix)]
    return sorted(found, key=lambda e: e.name)


def _load_queries() -> tuple[tuple[str, str], ...]:
    """(query, expected file name) pairs from ``gold.jsonl``, in file order."""
    queries = []
    for line in (_DATA / "gold.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        task = json.loads(line)
        (doc_id,) = {item["doc_id"] for item in task["evidence"]}
        queries.append((task["query"], doc_id))
    return tuple(queries)


# Queries with one clearly right source file, for the demo and for retrieval smoke tests.
SAMPLE_QUERIES: tuple[tuple[str, str], ...] = _load_queries()


def sample_gold_file():
    """The sample queries as the gold file the evaluation gate reads: `with sample_gold_file() as path:`
    (a real path even when the package is installed as a zip)."""
    return as_file(_DATA / "gold.jsonl")


def write_sample_corpus(dest: Path) -> list[Path]:
    """Write the sample corpus into ``dest`` (created if missing) and return the file paths.

    PDFs come first, then the text documents. Existing files of the same names are overwritten;
    repeated calls produce identical bytes.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for source in _data_files("pdfs", ".yaml"):
        spec = SamplePdf.from_mapping(yaml.safe_load(source.read_text(encoding="utf-8")))
        path = dest / spec.filename
        write_pdf(spec, path)
        paths.append(path)
    for source in _data_files("corpus"):
        path = dest / source.name
        # Text mode on both sides: LF line endings whatever the checkout did to the data file.
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            fh.write(source.read_text(encoding="utf-8"))
        paths.append(path)
    return paths
