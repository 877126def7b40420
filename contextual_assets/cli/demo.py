"""`make demo`: the whole loop on the embedded defaults (DuckDB, structural headers, the bundled MiniLM
embedder): write the sample corpus, ingest it through Dagster, search it, evaluate the new index version
with the shipped sample gold set, and show the gate's decision and the promotion. Everything runs on
the Dagster instance `make ui` opens, so its partitions and asset checks are there to look at."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

from contextual_assets.cli.main import main as ctx_main
from contextual_assets.deployment import configured_deployment
from contextual_assets.samples import (
    SAMPLE_QUERIES,
    sample_gold_file,
    write_sample_corpus,
)
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
    deployment = configured_deployment(settings)
    store = deployment.store
    embedder = deployment.embedder.get()
    version = deployment.current_index_version()
    found = 0
    for query, expected in SAMPLE_QUERIES:
        hits = store.search.hybrid(query, embedder.embed([query])[0], version, 3)
        found += any(h.doc_id.endswith(expected) for h in hits)
    print(f"\n{found}/{len(SAMPLE_QUERIES)} sample queries find their document in the top 3 (hybrid).")
    print(f"\nThe Dagster UI on this instance ({os.environ.get('DAGSTER_HOME', 'DAGSTER_HOME')}): `make ui`, then "
          "http://127.0.0.1:3000/assets: the `documents` partitions, `retrieval_eval` per document, and "
          "`candidate_evaluation`'s checks (eval_gate, header_integrity, gold_hygiene, header_diagnostics). "
          "`ctx status` shows the index versions.")
    # Last, so the output ends with the gate's decision and where production points.
    with sample_gold_file() as gold:
        print(f"\n$ ctx eval --gold {gold.name}")
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = ctx_main(["eval", "--gold", str(gold), "--json"])
    report = json.loads(captured.getvalue())
    for check in report["checks"]:
        print(f"check {check['name']:22s} {'passed' if check['passed'] else 'FAILED'}")
    if report["comparison"]:
        print(f"\n{report['comparison']}\n")
    if report["error"]:
        print(f"demo: the evaluation did not run: {report['error']}", file=sys.stderr)
    before, after = report["production_before"], report["production_after"]
    if report["gate_passed"]:
        moved = "promoted" if report["promoted"] and before != after else "already production"
        print(f"gate: passed for {report['candidate']} ({moved}; production was {before or 'not set'})")
    else:
        print(f"gate: BLOCKED {report['candidate']}: {report['gate_reasons'] or report['error']}")
    print(f"production -> {after or 'not set'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
