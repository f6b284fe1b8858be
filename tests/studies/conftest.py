"""Fixtures of the study tests: the tiny seeded Llama and its engine (shared with the lens
tests), and this folder's helpers on ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

from tiny_fixtures import engine, tiny

sys.path.insert(0, str(Path(__file__).parent))

__all__ = ["engine", "tiny"]
