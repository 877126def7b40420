"""`make demo`, the README's first command, on the embedded defaults: it ingests the sample corpus and
every sample query finds its document."""

from __future__ import annotations

import subprocess
import sys


def test_demo_ingests_and_finds_every_sample_document(tmp_path, env):
    result = subprocess.run([sys.executable, "-m", "contextual_assets.app.demo"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "10/10 sample queries find their document in the top 3" in result.stdout, result.stdout[-2000:]
