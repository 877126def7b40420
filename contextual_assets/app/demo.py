"""`make demo`: the whole loop on the embedded defaults (DuckDB, structural headers, the bundled MiniLM
embedder): write the sample corpus, ingest it through Dagster, search it, evaluate the new index version
with the shipped sample gold set, and show the gate's decision and the promotion. Everything runs on
the Dagster instance `make ui` opens, so its partitions and asset checks are there to look at."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from contextual_assets.app.cli import main as ctx_main
from contextual_assets.samples import SAMPLE_QUERIES, sample_gold_file, write_sample_corpus
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
    print(f"\nThe Dagster UI on this instance ({os.environ.get('DAGSTER_HOME', 'DAGSTER_HOME')}): `make ui`, then "
          "http://127.0.0.1:3000/assets: the `documents` partitions, and `retrieval_eval`'s checks "
          "(eval_gate, gold_hygiene, header_diagnostics). `ctx status` shows the index versions.")
    # Last, so the output ends with the gate's decision and where production points.
    with sample_gold_file() as gold:
        print(f"\n$ ctx eval --gold {gold.name}")
        code = ctx_main(["eval", "--gold", str(gold)])
    production = store.get_alias("production")
    print(f"\ngate: {'passed' if code == 0 else 'BLOCKED'} for {version}")
    print(f"production -> {production or 'not set'}")
    return 0 if code == 0 and production == version else 1


if __name__ == "__main__":
    sys.exit(main())
