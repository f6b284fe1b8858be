"""Where steering's inputs come from: contrastive pairs (for the vector), prompts (to steer),
a vector file, or a built-in task.

A contrastive JSONL line is ``{"id", "positive", "negative"}`` (or a patching pair's
``clean`` / ``corrupt``, read as positive / negative). A prompt line is ``{"id", "prompt",
"target", "versus"}``: the metric is the logit difference ``target − versus`` at the next
token (without ``versus``, the target's probability). A vector file is ``.npy`` or ``.pt``
holding one tensor of the site's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechscope.data.loaders import iter_jsonl
from mechscope.data.sentiment import sentiment_pairs, sentiment_prompts
from mechscope.data.tasks import check_task, tasks_of
from mechscope.errors import InputError
from mechscope.runs.summary import SummaryRepr

TASKS = tasks_of("steering")  # the registry's (mechscope.data.tasks)


@dataclass(frozen=True)
class Contrast(SummaryRepr):
    """Two texts that differ in the property to steer (positive minus negative)."""

    id: str
    positive: str
    negative: str


@dataclass(frozen=True)
class SteerPrompt(SummaryRepr):
    """A prompt to steer; its metric is read at the next token."""

    id: str
    prompt: str
    target: str | None = None
    versus: str | None = None


def _text(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InputError("expected a non-empty string", sample=where, field=key)
    return value


def check_ids(items: list, what: str) -> None:
    if not items:
        raise InputError(f"expected at least one {what}", field=what.replace(" ", "_") + "s")
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise InputError("expected unique ids", sample=item.id, field="id")
        seen.add(item.id)


def contrasts_from_records(records: list[tuple[str, dict[str, Any]]]) -> list[Contrast]:
    """Contrasts from ``(where, record)`` items (either form of the module docstring)."""
    out = []
    for where, rec in records:
        pos, neg = ("positive", "negative") if "positive" in rec else ("clean", "corrupt")
        out.append(
            Contrast(str(rec.get("id", where)), _text(rec, pos, where), _text(rec, neg, where))
        )
    check_ids(out, "contrastive pair")
    return out


def prompts_from_records(records: list[tuple[str, dict[str, Any]]]) -> list[SteerPrompt]:
    out = []
    for where, rec in records:
        sid = str(rec.get("id", where))
        target, versus = rec.get("target"), rec.get("versus")
        if versus is not None and target is None:
            raise InputError("expected a target beside versus", sample=sid, field="target")
        out.append(SteerPrompt(sid, _text(rec, "prompt", where), target, versus))
    check_ids(out, "prompt")
    return out


def _jsonl(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{Path(path).name} line {n}", rec) for n, rec in iter_jsonl(path)]


def load_contrasts(path: str | Path) -> list[Contrast]:
    return contrasts_from_records(_jsonl(path))


def load_prompts(path: str | Path) -> list[SteerPrompt]:
    return prompts_from_records(_jsonl(path))


def load_vector(path: str | Path) -> torch.Tensor:
    """A steering vector from ``.npy`` or ``.pt`` (fp32); refused in one line otherwise."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"expected a vector file, got {str(p)!r}", field="--vector")
    try:
        value = (
            torch.load(p, map_location="cpu", weights_only=True)
            if p.suffix == ".pt"
            else np.load(p)
        )
        vec = torch.as_tensor(value, dtype=torch.float32)
    except Exception as exc:
        raise InputError(
            f"expected a .npy or .pt tensor ({type(exc).__name__})", field="--vector"
        ) from None
    if vec.dim() == 0 or not bool(torch.isfinite(vec).all()):
        raise InputError("expected a finite vector of at least one dimension", field="--vector")
    return vec


def _sentiment(n: int, seed: int) -> tuple[list[Contrast], list[SteerPrompt]]:
    pairs = [(r["id"], r) for r in sentiment_pairs(n, seed=seed)]
    prompts = [(r["id"], r) for r in sentiment_prompts()]
    return contrasts_from_records(pairs), prompts_from_records(prompts)


#: How steering builds each task it takes (``TASKS``, from the registry): contrastive pairs
#: for the vector and the prompts to steer.
BUILDERS: dict[str, Callable[[int, int], tuple[list[Contrast], list[SteerPrompt]]]] = {
    "sentiment": _sentiment,
}


def task_inputs(task: str, n: int, *, seed: int = 0) -> tuple[list[Contrast], list[SteerPrompt]]:
    check_task(task, "steering")
    return BUILDERS[task](n, seed)
