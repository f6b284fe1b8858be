"""Fixtures for the Thought Anchors tests (helpers live in ``anchors_helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from anchors_helpers import REFERENCE, WordEmbedder


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not REFERENCE.exists():
        pytest.skip(f"golden Thought Anchors data not found at {REFERENCE}")
    return REFERENCE


@pytest.fixture
def word_embedder() -> WordEmbedder:
    return WordEmbedder()
