"""Readable, stable, safe document (partition) keys derived from where a file is: relative to the inbox,
the source root, or the file system root."""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

from contextual_assets.errors import DocumentError

MAX_KEY_LENGTH = 180


def _safe_part(part: str) -> str:
    chars = []
    for ch in unicodedata.normalize("NFC", part):
        chars.append(ch if ch.isalnum() or ch in "._-" else "_")
    cleaned = "".join(chars).strip("._") or "_"
    while "__" in cleaned:
        cleaned = cleaned.replace("__", "_")
    return cleaned.replace("..", ".")


def partition_key_for(relative: str | Path) -> str:
    """`reports/Q3 summary (final).pdf` -> `reports/Q3_summary_final_.pdf~1a2b3c`.

    Letters of any script, digits, `.`, `_`, `-` and `/` are kept; anything else becomes `_`. When
    that changes the name, a short hash of the original path is appended so two different files
    never share a key.
    """
    rel = Path(relative).as_posix()
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise DocumentError(rel, "path escapes the inbox")
    safe = "/".join(_safe_part(p) for p in parts)
    if safe != "/".join(unicodedata.normalize("NFC", p) for p in parts) or len(safe) > MAX_KEY_LENGTH:
        digest = hashlib.sha256(rel.encode("utf-8")).hexdigest()[:6]
        safe = f"{safe[: MAX_KEY_LENGTH - 7]}~{digest}"
    return safe


def key_for_path(path: Path, root: Path) -> str:
    """Key of a file under `root`; refuses paths (and symlinks) that resolve outside it."""
    try:
        relative = path.absolute().relative_to(root.absolute())
    except ValueError:
        raise DocumentError(str(path), f"is not under {root}") from None
    resolved_root = root.resolve()
    if resolved_root not in path.resolve().parents:
        raise DocumentError(str(path), f"resolves outside {root} (symlink); refused")
    return partition_key_for(relative)


def document_key(path: Path, *, inbox: Path | None, source_root: Path) -> str:
    """The key of a file from where it is, not from how it was named: `docs/a.md`, `./docs/a.md`,
    its absolute path and the folder `docs` all give one key.

    The file's resolved path relative to the inbox when it is under it (the key the inbox sensor
    gives it), else relative to `source_root`, else its whole resolved path without the leading `/`
    (e.g. `srv/shared/a.md`). Each through `partition_key_for`. `inbox` is None when the inbox is an
    object-store URL: no local file is under it.
    """
    resolved = path.resolve()
    for root in ([inbox.resolve()] if inbox is not None else []) + [source_root.resolve()]:
        if root in resolved.parents:
            return key_for_path(resolved, root)
    return partition_key_for(resolved.as_posix().lstrip("/"))
