"""Source code: one block per top-level definition (the chunker splits long ones by lines)."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

from .blocks import Block, ParsedSource
from .text import decode_text

CODE_EXTENSIONS = {
    ".py": "python", ".rs": "rust", ".go": "go", ".js": "javascript", ".ts": "typescript",
    ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".rb": "ruby", ".kt": "kotlin", ".swift": "swift", ".scala": "scala", ".cs": "csharp",
    ".php": "php", ".sh": "shell",
}

# A top-level definition starts at column 0 with one of these keywords (after modifiers).
_DEF_LINE = re.compile(
    r"^(?:(?:pub(?:\([^)]*\))?|export|default|public|private|protected|static|async|unsafe|"
    r"abstract|final|extern|inline|const|override|open|internal|data|sealed)\s+)*"
    r"(?:fn|struct|enum|trait|impl|mod|type|func|function|class|interface|object|def|module|"
    r"macro_rules!|record|union|namespace|template)\b[\s<]*([A-Za-z_][\w:]*)?"
)


# CPython 3.11 keeps the AST constructor's recursion depth per interpreter, not per thread: two documents
# parsed at once (the pipeline parses in threads) can fail with "SystemError: AST constructor recursion
# depth mismatch" (seen in the test suite). One parse at a time; it is a small share of a document's work.
_AST_LOCK = threading.Lock()


def _python_definitions(text: str) -> list[tuple[int, str]] | None:
    try:
        with _AST_LOCK:
            tree = ast.parse(text)
    except SyntaxError:
        return None
    starts: list[tuple[int, str]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            starts.append((first - 1, node.name))
    return starts


def _generic_definitions(lines: list[str]) -> list[tuple[int, str]]:
    starts: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        match = _DEF_LINE.match(line)
        if match:
            # Attach directly preceding doc comments and attributes to the definition.
            start = index
            while start > 0 and lines[start - 1].lstrip().startswith(("///", "//", "#[", "@", "/**", " *", "*")):
                start -= 1
            starts.append((start, match.group(1) or line.split()[0]))
    return starts


def parse_code(path: Path, data: bytes) -> ParsedSource:
    text = decode_text(path, data)
    lines = text.splitlines()
    language = CODE_EXTENSIONS.get(path.suffix.lower(), "code")
    starts = _python_definitions(text) if language == "python" else None
    if starts is None:
        starts = _generic_definitions(lines)
    blocks: list[Block] = []
    # Keep one start per line, in order, never reaching back into the previous definition.
    cleaned: list[tuple[int, str]] = []
    for start, name in sorted(starts):
        if cleaned and start <= cleaned[-1][0]:
            continue
        cleaned.append((start, name))
    starts = cleaned
    boundaries = [s for s, _ in starts]
    names = [n for _, n in starts]
    if not boundaries or boundaries[0] > 0:
        boundaries.insert(0, 0)
        names.insert(0, "(module)")
    boundaries.append(len(lines))
    for (begin, end), name in zip(zip(boundaries, boundaries[1:]), names):
        body = "\n".join(lines[begin:end]).strip("\n")
        if body.strip():
            blocks.append(Block(text=body, section_path=[name], is_code=True))
    return ParsedSource(kind=f"code:{language}", title=path.name, blocks=blocks)
