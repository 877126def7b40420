"""The versioned prompt template (a file under prompts/)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ConfigurationError

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
DEFAULT_PROMPT = "header_v2"


def escape_data(text: str) -> str:
    """Document text cannot open or close the delimiters it is placed in."""
    return re.sub(r"<\s*/?\s*(chunk|document)\b", lambda m: m.group(0).replace("<", "&lt;"), text,
                  flags=re.IGNORECASE)


def inline_data(text: str) -> str:
    """A document-controlled value placed on one line between double quotes (title, section path):
    it cannot end the quotes, start a new line of instructions, or open or close a delimiter."""
    return escape_data(" ".join(text.replace('"', "'").split()))


@dataclass(frozen=True)
class PromptTemplate:
    version: str
    system: str
    user: str

    def render(self, *, title: str, section_path: str, context: str, **values: str) -> list[dict[str, str]]:
        values = {"title": inline_data(title), "section_path": inline_data(section_path) or "(none)",
                  "context": escape_data(context), **{k: v if k == "chunks" else escape_data(v) for k, v in values.items()}}
        # One pass over the template, not str.format and not chained replaces: document text may
        # hold braces or text that looks like a placeholder.
        user = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), self.user)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    @property
    def instructions(self) -> tuple[str, ...]:
        """The template's own text, cut at its placeholders: what a header echoing its prompt repeats."""
        return tuple(part for part in re.split(r"\{\w+\}", f"{self.system}\n{self.user}") if part.strip())


@lru_cache(maxsize=8)
def load_prompt(name_or_path: str = DEFAULT_PROMPT) -> PromptTemplate:
    path = Path(name_or_path)
    if not path.suffix:
        path = PROMPTS_DIR / f"{name_or_path}.txt"
    if not path.exists():
        raise ConfigurationError(f"prompt template {path} not found")
    version, system, user, section = None, [], [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# prompt-version:"):
            version = line.split(":", 1)[1].strip()
        elif line.startswith("# "):
            continue
        elif line.strip() == "[system]":
            section = system
        elif line.strip() == "[user]":
            section = user
        elif section is not None:
            section.append(line)
    if not version or not system or not user:
        raise ConfigurationError(f"prompt template {path} needs '# prompt-version:', [system] and [user]")
    return PromptTemplate(version=version, system="\n".join(system).strip(), user="\n".join(user).strip())
