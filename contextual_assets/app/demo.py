"""`make demo`: write the sample corpus, ingest it through Dagster on the embedded defaults (DuckDB,
structural headers, the bundled MiniLM embedder), and show search results."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from contextual_assets.app.cli import main as ctx_main
from contextual_assets.samples import SAMPLE_QUERIES, write_sample_corpus
from contextual_assets.settings import PlatformSettings


def main() -> int:
    settings = PlatformSettings.from_env()
    samples_dir = Path(settings.home) / "demo" / "samples"
    paths = write_sample_corpus(samples_dir)
    print(f"wrote {len(paths)} sample documents to {samples_dir}")
    # Keys relative to the demo folder (`samples/...`), wherever the demo runs from.
    os.environ["CTX_SOURCE_ROOT"] = str(samples_dir.parent.absolute())
    code = ctx_main(["ingest", str(samples_dir)])
    if code != 0:
        print("demo: ingest reported failures (see above)", file=sys.stderr)
        return code
    for query, _ in SAMPLE_QUERIES[:3]:
        print(f"\n$ ctx search {query!r} -k 3")
        ctx_main(["search", query, "-k", "3"])
    from contextual_assets.defs.resources import build_resources

    resources = build_resources(settings)
    store = resources["store"].open()
    embedder = resources["embedder"].get()
    from contextual_assets.defs.resources import current_index_version

    version = current_index_version(resources["headers"], resources["embedder"], resources["parsing"])
    found = 0
    for query, expected in SAMPLE_QUERIES:
        hits = store.search_hybrid(query, embedder.embed([query])[0], version, 3)
        found += any(h.doc_id.endswith(expected) for h in hits)
    print(f"\n{found}/{len(SAMPLE_QUERIES)} sample queries find their document in the top 3 (hybrid).")
    print("Next: `make ui` opens the Dagster UI on the same store; `ctx status` shows the index.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
