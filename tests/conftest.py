"""Shared fixtures: real models under ../shared (skipped cleanly when absent), offline hub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
STORIES = Path(os.environ.get("MECHSCOPE_STORIES", SHARED / "models" / "stories260K"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared material not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def stories_path() -> Path:
    if not (STORIES / "config.json").exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    return STORIES


@pytest.fixture(scope="session")
def smollm2():
    """The real demo model (converted once from the GGUF shipped on PyPI)."""
    from mechscope.errors import ModelSpecError
    from mechscope.models import DEFAULT_MODEL, load_model

    try:
        return load_model(DEFAULT_MODEL)
    except ModelSpecError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def gemma3():
    """Gemma 3 270M, assembled from its five PyPI packages and converted once (about a
    minute on 2 cores, 3.3 GB peak); skipped, with the pip command, when they are missing."""
    from mechscope.errors import ModelSpecError
    from mechscope.models import load_model

    try:
        return load_model("gemma3-270m")
    except ModelSpecError as exc:
        if "pip install" not in str(exc):  # installed but broken: a failure, not a skip
            raise
        pytest.skip(str(exc))


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``numerics`` every test of a module that compares numbers (tests/numerics.py)."""
    from numerics import compares_numbers

    for item in items:
        if compares_numbers(item.path):
            item.add_marker(pytest.mark.numerics)
