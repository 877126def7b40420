"""`ctx serve`'s query embedder on onnxruntime (embedding_onnx.py): the bundled MiniLM exported from
torch gives torch's vectors, and a model whose vectors differ stays on torch."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from contextual_assets.embedder_config import EmbedderCatalog
from contextual_assets.embedding import SentenceTransformerEmbedder
from contextual_assets.embedding_onnx import OnnxSentenceEmbedder

TEXTS = ["harbour dues", "", "Über die Haftung des Frachtführers: § 425 HGB (Güterschäden) und Verspätung.",
         "def refill(self): self.tokens = min(self.capacity, self.tokens + self.rate * elapsed)",
         " ".join(["clause 14.3 limits liability to the freight paid"] * 80),  # over the 256-token limit
         "hotel per night in London", "late delivery penalty", "ninety days written notice",
         "SELECT * FROM chunks WHERE index_version = ?", "?"]


@pytest.fixture(scope="module")
def torch_embedder() -> SentenceTransformerEmbedder:
    return EmbedderCatalog(batch_size=4, threads=1).get()


def test_onnxruntime_gives_torchs_vectors(torch_embedder):
    embedder = EmbedderCatalog(batch_size=4, threads=1, runtime="onnx").get()
    assert isinstance(embedder, OnnxSentenceEmbedder)
    assert embedder.active, embedder.reason
    assert embedder.identity == torch_embedder.identity and embedder.dimension == torch_embedder.dimension == 384
    got = np.asarray(embedder.embed(TEXTS))  # 10 texts in batches of 4: padding and truncation in a batch
    expected = np.asarray(torch_embedder.embed(TEXTS))
    assert got.shape == expected.shape == (len(TEXTS), 384)
    assert np.abs(got - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    alone = np.asarray(embedder.embed([TEXTS[2]]))  # a query alone, unpadded, as in a batch
    assert np.abs(alone[0] - got[2]).max() < 1e-5
    assert embedder.embed([]) == []


class FlippedEmbedder(SentenceTransformerEmbedder):
    """The real model with its vectors negated on the torch side: it stands for a model that pools or
    normalises otherwise than mean + L2, which the export cannot know from the weights."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[-x for x in vector] for vector in super().embed(texts)]


def test_a_model_whose_vectors_differ_stays_on_torch(caplog):
    flipped = FlippedEmbedder(threads=1)
    embedder = OnnxSentenceEmbedder(flipped, threads=1)
    with caplog.at_level(logging.WARNING, logger="contextual_assets.embedding_onnx"):
        assert not embedder.active
    assert "differ from torch's" in embedder.reason
    assert any("CTX_SERVE_QUERY_RUNTIME=torch" in r.getMessage() for r in caplog.records)
    assert embedder.embed(TEXTS[:3]) == flipped.embed(TEXTS[:3])  # torch answers, as the model defines
