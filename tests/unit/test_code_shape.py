"""The code's shape, read with `ast` (nothing of the product is imported): no import cycle between the
product's modules, no module over 400 lines, no function over 60."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contextual_assets", "eval_assets")
TREES = (*PACKAGES, "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources(trees: tuple[str, ...]) -> Iterator[Path]:
    """Every Python file under the given top-level folders, in a stable order."""
    for tree in trees:
        yield from sorted((ROOT / tree).rglob("*.py"))


def _module_name(path: Path) -> str:
    """`a/b/c.py` -> `a.b.c`; `a/b/__init__.py` -> `a.b`."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The known modules that any import statement in `path` names (top level, in functions, under
    TYPE_CHECKING alike): each one is an edge, whether or not it runs at import time."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""  # `..x`: one package up
            source = ".".join(p for p in (base, node.module or "") if p)
            # `from pkg import name` is an edge to the submodule `pkg.name` when there is one, else to `pkg`.
            found.update(f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _long_functions(path: Path) -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of each function or method in `path` longer than the limit; the lines run
    from `def` to the end, decorators excluded."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        yield qualname, lines
                yield from walk(child, f"{qualname}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), "")


def test_no_import_cycles() -> None:
    paths = {_module_name(p): p for p in _sources(PACKAGES)}
    modules = set(paths)
    graph = {name: _imports(path, modules) for name, path in paths.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_long_modules() -> None:
    long = [(p, len(p.read_text(encoding="utf-8").splitlines())) for p in _sources(TREES)]
    offenders = [f"{p.relative_to(ROOT)} ({n})" for p, n in long if n > MAX_MODULE_LINES]
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(offenders)


def test_no_long_functions() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{name} ({n})" for p in _sources(TREES) for name, n in _long_functions(p)]
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def _is_dagster_side(module: str) -> bool:
    """The definitions and what launches them (the code location, the CLI), as opposed to the library."""
    return ".defs" in f".{module}." or module == "contextual_assets.definitions" or module.startswith(
        "contextual_assets.cli")


def test_the_library_imports_no_definitions() -> None:
    """Each library sits below its `defs/` folder: only the Dagster side imports definitions."""
    paths = {_module_name(p): p for p in _sources(PACKAGES)}
    modules = set(paths)
    upward = sorted(f"{name} -> {target}" for name, path in paths.items() if not _is_dagster_side(name)
                    for target in _imports(path, modules) if _is_dagster_side(target))
    assert not upward, "library modules importing the Dagster side:\n" + "\n".join(upward)
