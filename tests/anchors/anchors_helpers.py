"""Helpers shared by the Thought Anchors tests: golden-data paths and a toy embedder."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "thought-anchors"


def reference_folders() -> list[Path]:
    """The 40 published trace folders (empty when the shared material is absent)."""
    return sorted(p.parent for p in REFERENCE.glob("*/*/*/chunks_labeled.json"))


def resampled_folders() -> list[Path]:
    """The four folders that also publish the resampled first sentences."""
    return sorted(p.parent for p in REFERENCE.glob("*/*/*/chunks_resampled.json"))


def folder_id(folder: Path) -> str:
    return "/".join(folder.parts[-3:])


def load_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


class WordEmbedder:
    """Deterministic bag-of-words embedding: identical word sets → cosine 1.

    Each lower-cased word maps to a fixed random unit vector (seeded by its hash); a
    sentence is the sum. Cosines are easy to reason about in hand-computed tests.
    """

    def __init__(self, dim: int = 64):
        self.dim = dim
        self.calls = 0

    def _word(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).normal(size=self.dim)
        return v / np.linalg.norm(v)

    def encode(self, texts: Sequence[str]) -> np.ndarray:  # [n, dim]
        self.calls += 1
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                out[i] += self._word(word)
            if not out[i].any():
                out[i, 0] = 1.0
        return out
