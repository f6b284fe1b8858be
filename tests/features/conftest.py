"""Fixtures for the features tests: the tiny seeded Llama and small dictionaries on it."""

from __future__ import annotations

from tiny_fixtures import engine, tiny  # noqa: F401
