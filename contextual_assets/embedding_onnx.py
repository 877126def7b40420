"""A local sentence-transformers model run by onnxruntime instead of torch: `ctx serve`'s query path.

Why: a query is ~15 tokens, and at that size torch's CPU forward is mostly per-call overhead and a GEMM
that is slow on small shapes. On the 2-core dev machine, one thread: one query 6.3 ms against 14.6, three
in one batch 15.4 against 26.5 (bench/README.md, *Search*). The transformer is exported from the loaded
torch module when the first query arrives (in memory, no file to keep in step with the weights) and used
only if it gives torch's vectors on probe texts; otherwise torch answers and a warning says why.
"""

from __future__ import annotations

import io
import logging
import threading
import warnings

import numpy as np

from contextual_assets.embedding import Embedder, SentenceTransformerEmbedder

log = logging.getLogger(__name__)

# Texts that exercise what a query can: one word, padding in a batch, and truncation at the model's limit.
PROBES = ("harbour dues", "How is demurrage computed when a vessel berths late under the 1911 tariff?",
          " ".join(["section 4.2 of the charter party limits the carrier's liability"] * 60))


class OnnxUnsuitable(Exception):
    """The model cannot be run by onnxruntime with torch's results (why is the message)."""


class OnnxSentenceEmbedder(Embedder):
    """The same model, vectors and identity as `embedder`, embedded by onnxruntime. The pooling is mean
    over the attention mask then L2 normalisation (sentence-transformers' usual pipeline); a model with
    another pipeline fails the probe check and stays on torch."""

    TOLERANCE = 1e-4  # largest |difference| in any coordinate of a unit vector; measured: 1.5e-7

    def __init__(self, embedder: SentenceTransformerEmbedder, threads: int = 1):
        self.torch = embedder
        self.identity = embedder.identity
        self.threads = threads or 1
        self.reason = ""  # why torch answers, once the export was tried and refused
        self._session = None
        self._inputs: list[str] = []
        self._tried = False
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:  # type: ignore[override]
        return self.torch.dimension

    @property
    def active(self) -> bool:
        """Whether onnxruntime answers (loads the model on first use)."""
        return self._load() is not None

    def warm(self) -> None:
        self._load()

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._load() is None:
            return self.torch.embed(texts)
        size = self.torch.batch_size
        return [row for start in range(0, len(texts), size) for row in self._run(texts[start:start + size]).tolist()]

    def _load(self):
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._session = self._export()
                except OnnxUnsuitable as exc:
                    self.reason = str(exc)
                except Exception as exc:  # an exporter or runtime failure leaves the torch path, which works
                    self.reason = f"the export failed ({type(exc).__name__}: {str(exc)[:200]})"
                if self.reason:
                    log.warning("%s embeds queries with torch, not onnxruntime: %s (CTX_SERVE_QUERY_RUNTIME=torch "
                                "silences this)", self.identity, self.reason)
            return self._session

    def _export(self):
        try:
            import onnxruntime
            import torch
        except ImportError as exc:
            raise OnnxUnsuitable(f"{exc.name} is not installed") from None
        model = self.torch.model
        if str(model.device) != "cpu":
            raise OnnxUnsuitable(f"the model runs on {model.device}, where torch is the faster runtime")
        transformer = model[0]
        network = getattr(transformer, "auto_model", None)
        if network is None:
            raise OnnxUnsuitable(f"its first module ({type(transformer).__name__}) has no transformer to export")
        features = self._features(list(PROBES[:2]))
        names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in features]
        self._inputs = names

        class Hidden(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.network = network

            def forward(self, *tensors):
                return self.network(**dict(zip(names, tensors))).last_hidden_state

        buffer = io.BytesIO()
        axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "hidden"]}
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(Hidden().eval(), tuple(features[name] for name in names), buffer, dynamo=False,
                              input_names=names, output_names=["hidden"], dynamic_axes=axes, opset_version=17)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        session = onnxruntime.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
        expected = np.asarray(self.torch.embed(list(PROBES)), dtype=np.float32)
        got = self._run(list(PROBES), session)
        if got.shape != expected.shape or not np.all(np.abs(got - expected) <= self.TOLERANCE):
            gap = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
            raise OnnxUnsuitable(f"its vectors differ from torch's by up to {gap:.2g} on probe texts (the model "
                                 "pools or normalises otherwise than mean + L2)")
        return session

    def _features(self, texts: list[str]) -> dict:
        model = self.torch.model  # sentence-transformers 6 renamed tokenize to preprocess
        return (model.preprocess if hasattr(model, "preprocess") else model.tokenize)(texts)

    def _run(self, texts: list[str], session=None) -> np.ndarray:
        features = self._features(texts)
        hidden = (session or self._session).run(None, {name: features[name].numpy() for name in self._inputs})[0]
        mask = features["attention_mask"].numpy()[..., None].astype(np.float32)
        vectors = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
