"""Fixtures of the lens tests: the tiny seeded Llama and its engine."""

from __future__ import annotations

import sys
from pathlib import Path

from tiny_fixtures import engine, tiny

sys.path.insert(0, str(Path(__file__).parent))

__all__ = ["engine", "tiny"]
