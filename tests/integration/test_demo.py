"""`make demo`, the README's first command, on the embedded defaults: it ingests the sample corpus, every
sample query finds its document, and the loop closes: the shipped sample gold set is evaluated, the
gate decides, the version is promoted, and the Dagster instance `make ui` opens holds all of it."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_runs_the_whole_loop(tmp_path, env):
    result = subprocess.run([sys.executable, "-m", "contextual_assets.cli.demo"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    assert "10/10 sample queries find their document in the top 3" in out, out[-2000:]
    # No library logging on stdout (it once leaked DEBUG lines of a BM25 library).
    assert not re.search(r"^(DEBUG|INFO|WARNING|ERROR):", out, re.M), out[:2000]
    lines = out.strip().splitlines()
    gate = re.fullmatch(r"gate: passed for (iv-[0-9a-f]+) \(promoted; production was not set\)", lines[-2])
    assert gate, lines[-3:]
    assert lines[-1] == f"production -> {gate.group(1)}"
    for check in ("eval_gate", "header_integrity", "gold_hygiene", "header_diagnostics"):
        assert re.search(rf"^check {check}\s+passed$", out, re.M), out[-3000:]

    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        partitions = instance.get_dynamic_partitions("documents")
        assert len(partitions) == 7
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        assert materialized == set(partitions)
        for check in ("eval_gate", "header_integrity", "gold_hygiene", "header_diagnostics"):
            record = instance.get_latest_asset_check_evaluation_record(
                dg.AssetCheckKey(dg.AssetKey("candidate_evaluation"), check))
            assert record is not None and record.status.value == "SUCCEEDED", (check, record)
        # One evaluation partition per document, each with its own metadata.
        assert instance.get_materialized_partitions(dg.AssetKey("retrieval_eval")) == set(partitions)

    again = subprocess.run([sys.executable, "-m", "contextual_assets.cli.demo"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=900, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-2] == f"gate: passed for {gate.group(1)} (already production; " \
                                                    f"production was {gate.group(1)})"
