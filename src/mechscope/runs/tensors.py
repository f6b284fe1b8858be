"""One array type in every public result: torch tensors, numpy only on disk.

The engine's results (the cache, direct logit attribution) are torch, as TransformerLens'
are, and a researcher reaches for ``.topk`` or ``.argmax(dim=...)`` on a sweep's grid as on
a cache read. So every result's array fields and array-returning methods give torch
tensors (CPU unless a class says otherwise), whatever the workflow computed them with.
The workflows' own arithmetic stays where it is (numpy and scipy for statistics and
figures): a result converts what it is given when a field is set
(:class:`TensorFields`), and code that does numpy arithmetic on a result reads it through
:func:`array` (zero-copy on the CPU). Payloads on disk stay numpy
(:mod:`mechscope.runs.payload` turns a tensor into an array when it is written, and
``from_payload`` gives arrays that the fields turn back into tensors).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch


def tensor(value: Any) -> Any:
    """A numeric or bool numpy array as a CPU tensor of the same dtype and values (sharing
    its memory where numpy allows: a read-only array is copied first); anything else
    (strings, scalars, tensors) unchanged."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        if not value.flags.writeable or not value.dtype.isnative:
            value = np.array(value, dtype=value.dtype.newbyteorder("="))
        return torch.from_numpy(value)
    return value


def tensors(value: Any) -> Any:
    """:func:`tensor` through dicts, lists, tuples and the fields of a dataclass instance
    (new containers, a dataclass copied with ``dataclasses.replace`` where a field changes;
    other values as they are)."""
    if isinstance(value, np.ndarray):
        return tensor(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            if f.init:
                old = getattr(value, f.name)
                new = tensors(old)
                if new is not old:
                    changed[f.name] = new
        return dataclasses.replace(value, **changed) if changed else value
    if isinstance(value, dict):
        return {k: tensors(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tensors(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(tensors(v) for v in value)
    return value


def array(value: Any) -> Any:
    """A tensor as a numpy array (detached, on the CPU; zero-copy for a CPU tensor), for
    numpy arithmetic on a result's field; a numpy array or None unchanged."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def arrays(value: Any) -> Any:
    """:func:`array` through dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return array(value)
    if isinstance(value, dict):
        return {k: arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [arrays(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(arrays(v) for v in value)
    return value


class TensorFields:
    """A result whose fields named in ``_tensor_fields`` hold torch tensors: a numpy array
    set there (by the constructor, ``from_payload`` or a later assignment), or one inside a
    dict or list set there, is turned into a tensor as it is set."""

    _tensor_fields: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._tensor_fields:
            value = tensors(value)
        super().__setattr__(name, value)
