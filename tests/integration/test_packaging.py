"""What `pip install .` puts into site-packages: the two product packages, the search client (clients/python/)
and their data, nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from tests.support import REPO_ROOT


def test_wheel_holds_the_product_packages_and_their_data_only(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    for package in ("contextual_assets", "eval_assets", "bench", "tests", "clients"):
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                             str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"contextual_assets", "eval_assets", "ctx_search_client"}
    for data in ("contextual_assets/prompts/header_v2.txt", "contextual_assets/samples/gold.jsonl",
                 "contextual_assets/samples/corpus/rate_limiter.py", "contextual_assets/samples/corpus/release_notes.txt",
                 "contextual_assets/samples/pdfs/01_supply_agreement.yaml"):
        assert data in names, data
    # The peers bench.ingest measures (the `bench` extra) stay out of the product's code, apart from the
    # search client's LlamaIndex retriever (its own optional extra, `llamaindex`).
    wheel_zip = zipfile.ZipFile(wheel)
    peers_used = [n for n in names if n.endswith(".py") and b"llama_index" in wheel_zip.read(n)]
    assert peers_used == ["ctx_search_client/llamaindex.py"], \
        f"the product imports a peer's library: {peers_used}"
    requires = [line.split(":", 1)[1].strip() for line in
                zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
                .decode().splitlines() if line.startswith("Requires-Dist:")]
    assert_installs_anywhere(requires)


def assert_installs_anywhere(requires: list[str]) -> None:
    """No exact pins on what a user's machine decides (torch's CPU or CUDA build, dagster's patch), and an
    upper bound on dagster's tested minor."""
    from packaging.requirements import Requirement

    by_name = {Requirement(r).name: Requirement(r) for r in requires if "extra ==" not in r}
    peers = [name for name in by_name if name.startswith("llama-index")]
    assert not peers, f"{peers}: the peers' libraries belong to the bench extra only"
    torch = by_name["torch"].specifier
    assert torch and not any(s.operator in ("==", "===") for s in torch), f"torch must be a range: {torch}"
    assert "2.13.0" in torch and "2.14.1" in torch, f"torch range {torch} must admit the tested builds"
    for name in ("dagster", "dagster-webserver"):
        spec = by_name[name].specifier
        import dagster

        major, minor = (int(part) for part in dagster.__version__.split(".")[:2])
        assert f"{major}.{minor + 1}.0" not in spec, f"{name} needs an upper bound on the tested minor: {spec}"
        assert dagster.__version__ in spec, f"{name} {spec} excludes the tested dagster {dagster.__version__}"
