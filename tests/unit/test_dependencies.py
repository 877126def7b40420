"""What the product imports is what it declares: every third-party module imported under
contextual_assets/ and eval_assets/ belongs to a distribution named in pyproject's dependencies (or in
the extra its module is for), and the pins that guard file formats and APIs have an upper bound."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contextual_assets", "eval_assets", "ctx_search_client")
# Where each package's source lies: the search client is its own distribution too (clients/python/).
SOURCES = {"contextual_assets": REPO / "contextual_assets", "eval_assets": REPO / "eval_assets",
           "ctx_search_client": REPO / "clients" / "python" / "ctx_search_client"}
# Imported only where an optional extra is installed, and said so at the import.
EXTRA_IMPORTS = {"s3fs": "s3", "llama_index": "llamaindex", "langchain_core": "langchain"}
# The frameworks the retrievers plug into are imported there only: the platform runs without them.
FRAMEWORK_MODULES = {"llama_index": "clients/python/ctx_search_client/llamaindex.py",
                     "langchain_core": "clients/python/ctx_search_client/langchain.py"}


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in requirements}


def imported_modules() -> dict[str, Path]:
    """Top-level modules imported anywhere in the product's packages (absolute imports), with one file each."""
    return {module: paths[0] for module, paths in importers().items()}


def importers() -> dict[str, list[Path]]:
    """Top-level modules imported anywhere in the product's packages (absolute imports), with every file."""
    found: dict[str, list[Path]] = {}
    for package in PACKAGES:
        for path in SOURCES[package].rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    files = found.setdefault(name.split(".")[0], [])
                    if path not in files:
                        files.append(path)
    return found


def test_the_retrievers_frameworks_are_imported_by_their_retriever_only():
    found = importers()
    for module, allowed in FRAMEWORK_MODULES.items():
        files = sorted(str(p.relative_to(REPO)) for p in found.get(module, []))
        assert files == [allowed], f"{module} is imported by {files}, not by {allowed} alone"


def test_every_imported_package_is_declared():
    project = _project()
    declared = _names(project["dependencies"])
    extras = {extra: _names(reqs) for extra, reqs in project["optional-dependencies"].items()}
    distributions = packages_distributions()
    missing = []
    for module, path in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module in PACKAGES or module == "__future__":
            continue
        owners = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [])}
        assert owners, f"{module} (imported in {path.relative_to(REPO)}) is installed by no distribution"
        allowed = declared | extras.get(EXTRA_IMPORTS.get(module, ""), set())
        if not owners & allowed:
            missing.append(f"{module} ({', '.join(sorted(owners))}) in {path.relative_to(REPO)}")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_dagster_is_pinned_to_its_tested_minor_and_formats_have_an_upper_bound():
    requirements = {Requirement(r).name: Requirement(r) for r in _project()["dependencies"]}
    for name in ("dagster", "dagster-webserver", "dagster-postgres"):
        assert str(requirements[name].specifier).startswith("~="), f"{name} is not pinned to its minor"
    # pymupdf: its version is part of the index version (index_version.py); a new major may change its API.
    for name in ("duckdb", "sentence-transformers", "psycopg", "torch", "pydantic", "pymupdf"):
        spec = requirements[name].specifier
        assert any(s.operator == "<" for s in spec), f"{name} has no upper bound: {spec}"
    # Dagster's libraries in the extras (dagster-k8s, dagster-docker, dagster-aws, dagster-dg-cli) follow
    # the same release lines: dagster's own (1.x) or its libraries' (0.x, as dagster-postgres).
    lines = {str(requirements["dagster"].specifier), str(requirements["dagster-postgres"].specifier)}
    for extra, reqs in _project()["optional-dependencies"].items():
        for req in map(Requirement, reqs):
            if req.name.startswith("dagster"):
                assert str(req.specifier) in lines, f"{req.name} in [{extra}] is {req.specifier}, not one of {lines}"
    assert "dagster-aws" in _names(_project()["optional-dependencies"]["s3"]), "S3 step logs need dagster-aws"
    assert "pgvector" not in requirements, "vectors are SQL literals; the adapter is not used (see pyproject)"


def test_the_search_client_imports_httpx_and_pydantic_only():
    """clients/python/ctx_search_client: what an application installs to call the search API."""
    allowed = {"httpx", "pydantic", "ctx_search_client", "__future__", *FRAMEWORK_MODULES}
    for path in SOURCES["ctx_search_client"].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in allowed, f"{path.name} imports {name}"
