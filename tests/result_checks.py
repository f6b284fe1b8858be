"""What every public result and object promises a user at the prompt: one array type (CPU
torch tensors, never numpy, in every field and nested field) and a ``repr`` of a few lines."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

#: The most characters a public object's ``repr`` may print.
REPR_LIMIT = 2000


def array_paths(value, path: str = "", seen: set[int] | None = None) -> list[tuple[str, type]]:
    """``(path, type)`` of every array reachable from ``value`` through dataclass fields,
    dicts, lists and tuples (frames are tables, not arrays, and are not entered)."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, pd.DataFrame | str | bytes):
        return []
    seen.add(id(value))
    if isinstance(value, np.ndarray | torch.Tensor):
        return [(path, type(value))]
    if isinstance(value, np.generic):
        return []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = [(f"[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [(f"[{i}]", v) for i, v in enumerate(value)]
    else:
        return []
    return [hit for key, item in items for hit in array_paths(item, path + key, seen)]


def assert_tensors(value, what: str = "") -> None:
    """Every array ``value`` holds is a torch tensor, on the CPU."""
    found = array_paths(value)
    numpy = [p for p, t in found if t is not torch.Tensor]
    assert not numpy, f"{what or type(value).__name__}: numpy arrays at {numpy}"


def assert_tensor(value, what: str) -> None:
    """An array method's return value is a torch tensor."""
    assert isinstance(value, torch.Tensor), f"{what} returned {type(value).__name__}"


def assert_short_repr(value) -> str:
    """``repr`` within :data:`REPR_LIMIT` characters, naming the class; returns it."""
    text = repr(value)
    assert len(text) < REPR_LIMIT, f"{type(value).__name__}: repr of {len(text)} characters"
    assert text.startswith(type(value).__name__), text[:80]
    return text
