"""The server sampler's cache: one small JSON file per rollout in the run directory.

A rollout's text is fixed by its model, prompt, sampling settings and seed, so those fields
name its file (a sha256, :attr:`Rollout.key`); the server's address is not part of it, so a
run can move to another server of the same model and keep every rollout. Files are written
atomically; a missing or unreadable one is a miss, asked for again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from mechscope.runs.atomic import atomic_write_json


@dataclass(frozen=True)
class Rollout:
    """Everything that decides a rollout's text, hence its cache key."""

    model: str
    prompt: str
    temperature: float
    top_p: float
    max_tokens: int
    seed: int

    @cached_property
    def key(self) -> str:
        """sha256 of the fields, normalised so ``temperature=0`` and ``0.0`` share a key."""
        fields = {
            "model": self.model,
            "prompt": self.prompt,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "max_tokens": int(self.max_tokens),
            "seed": int(self.seed),
        }
        text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RolloutCache:
    """One JSON file per rollout, named by its key; a missing or unreadable file is a miss."""

    def __init__(self, directory: Path | None):
        self.directory = Path(directory) if directory is not None else None

    def get(self, rollout: Rollout) -> str | None:
        if self.directory is None:
            return None
        try:
            record = json.loads((self.directory / f"{rollout.key}.json").read_text("utf-8"))
        except (OSError, ValueError):
            return None
        text = record.get("text") if isinstance(record, dict) else None
        return text if isinstance(text, str) else None

    def put(self, rollout: Rollout, text: str, finish_reason: str | None) -> None:
        if self.directory is None:
            return
        prompt_hash = hashlib.sha256(rollout.prompt.encode("utf-8")).hexdigest()
        record = {
            "model": rollout.model,
            "prompt_sha256": prompt_hash,  # the prompt itself is long and kept by the run
            "temperature": rollout.temperature,
            "top_p": rollout.top_p,
            "max_tokens": rollout.max_tokens,
            "seed": rollout.seed,
            "text": text,
            "finish_reason": finish_reason,
        }
        atomic_write_json(self.directory / f"{rollout.key}.json", record)
