"""The published Thought Anchors results (Bogdan et al. 2025) as the planner and the
simulation read them: one folder per trace, ``<model>/<correct|incorrect>_base_solution/
problem_<id>/`` with ``problem.json``, ``base_solution.json`` and ``chunks_labeled.json``.

``chunks_labeled.json`` gives every chunk's ``accuracy`` (the answer rate of 100 rollouts
resampled from just before it) and ``resampling_importance_accuracy``, which is exactly
``accuracy[i + 1] - accuracy[i]``; the last chunk has no next position and is published as
0, so it carries no importance here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError

LABELS = "chunks_labeled.json"


@dataclass(frozen=True)
class PublishedTrace:
    """One published trace: its id (``model/solution/problem``), per-position accuracies and
    per-chunk importances as published."""

    id: str
    folder: Path
    accuracy: np.ndarray  # [P] answer rate of the rollouts from position p (chunk p resampled)
    importance: np.ndarray  # [P-1] resampling importance (accuracy), chunks 0 … P-2

    @property
    def n_positions(self) -> int:
        return int(self.accuracy.size)

    def trace(self) -> Trace:
        """The trace itself (its text, from ``base_solution.json``)."""
        return Trace.from_reference(self.folder, self.id)


def published_folders(root: Path | str, model: str | None = None) -> list[Path]:
    """The trace folders under ``root`` (a folder of models, one model, or one trace), sorted;
    ``model`` keeps those of one model folder (e.g. ``deepseek-r1-distill-qwen-14b``)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"a folder of published traces, got {str(root)!r}", field="--published")
    found = sorted(p.parent for p in root.glob(f"**/{LABELS}"))
    if model is not None:
        found = [f for f in found if model in f.relative_to(root).parts or root.name == model]
    if not found:
        what = f" of model {model!r}" if model else ""
        raise InputError(f"trace folders{what} with {LABELS} under {root}", field="--published")
    return found


def load_published(root: Path | str, model: str | None = None) -> list[PublishedTrace]:
    """Every published trace under ``root`` (see :func:`published_folders`)."""
    root = Path(root)
    out = []
    for folder in published_folders(root, model):
        try:
            rows = json.loads((folder / LABELS).read_text(encoding="utf-8"))
            acc = np.array([float(r["accuracy"]) for r in rows])
            imp = np.array([float(r["resampling_importance_accuracy"]) for r in rows[:-1]])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"a readable {LABELS} with accuracies ({exc})", sample=str(folder)
            ) from exc
        if acc.size < 2 or not np.all((acc >= 0) & (acc <= 1)):
            raise InputError("at least 2 chunks with accuracies in [0, 1]", sample=str(folder))
        bad = np.flatnonzero(~np.isfinite(imp))
        if bad.size:  # a NaN left its chunk out of coverage and the correlations, silently
            raise InputError(
                f"a finite resampling_importance_accuracy for every chunk but the last, got "
                f"{imp[bad[0]]} at chunk {bad[0]}",
                sample=str(folder),
            )
        tid = "/".join(folder.parts[-3:])
        out.append(PublishedTrace(tid, folder, acc, imp))
    return out
