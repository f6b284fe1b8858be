"""A fast identity for model weights, recorded in the manifest and checked on resume.

This is a *sample*, not a full hash. Hashing every byte of an 8B-parameter model
(16 GB in bf16) takes about a minute of CPU time and, for a model on the GPU, a
full copy to host memory; a run directory only needs to tell "same checkpoint"
from "different checkpoint". So the fingerprint hashes every tensor's name, shape
and dtype, plus ``n_bytes_per_tensor`` bytes taken as evenly spaced *whole
elements* across the flattened tensor (first and last element included); a tensor
no larger than that is hashed in full. Any change of architecture, dtype or shape,
any fine-tune, and any re-quantisation changes the fingerprint; a single edited
element in a large tensor can be missed. Pass ``n_bytes_per_tensor=None`` for an
exact (slow) hash of every byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

DEFAULT_BYTES_PER_TENSOR = 4096


def _state_dict(weights: Any) -> Mapping[str, Any]:
    if hasattr(weights, "state_dict") and callable(weights.state_dict):
        return weights.state_dict()
    if isinstance(weights, Mapping):
        return weights
    raise TypeError(f"expected a state dict or a module, got {type(weights).__name__}")


def _strided_indices(numel: int, k: int) -> np.ndarray:
    """``k`` evenly spaced indices into ``range(numel)``, first and last included (exact ints)."""
    if k <= 1:
        return np.zeros(1, dtype=np.int64)
    return (np.arange(k, dtype=np.int64) * (numel - 1)) // (k - 1)


def _sample_bytes_torch(tensor: Any, n_bytes: int | None) -> tuple[str, tuple[int, ...], bytes]:
    import torch

    t = tensor.detach()
    if t.device.type == "meta":
        raise ValueError("cannot fingerprint weights on the meta device (not loaded)")
    flat = t.reshape(-1)  # [numel]
    item = t.element_size()
    if n_bytes is not None and flat.numel() * item > n_bytes:
        k = max(1, n_bytes // item)
        idx = torch.from_numpy(_strided_indices(flat.numel(), k)).to(flat.device)
        flat = flat[idx]  # [k]; only k elements leave the device
    raw = flat.contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), raw  # "float32" as numpy


def _sample_bytes_numpy(
    array: np.ndarray, n_bytes: int | None
) -> tuple[str, tuple[int, ...], bytes]:
    flat = np.ascontiguousarray(array).reshape(-1)  # [numel]
    if n_bytes is not None and flat.nbytes > n_bytes:
        k = max(1, n_bytes // flat.itemsize)
        flat = flat[_strided_indices(flat.size, k)]
    return str(array.dtype), tuple(array.shape), flat.tobytes()


def weights_fingerprint(
    weights: Any, n_bytes_per_tensor: int | None = DEFAULT_BYTES_PER_TENSOR
) -> str:
    """sha256 hex digest over names, shapes, dtypes and a strided byte sample of each tensor.

    ``weights`` is a ``torch.nn.Module`` or a mapping of names to torch tensors / numpy
    arrays. Names are hashed in sorted order, so the order of the state dict does not
    matter. See the module docstring for what the sample can and cannot detect.
    """
    if n_bytes_per_tensor is not None and n_bytes_per_tensor < 1:
        raise ValueError(f"n_bytes_per_tensor must be positive or None, got {n_bytes_per_tensor}")
    state = _state_dict(weights)
    h = hashlib.sha256()
    h.update(f"mechscope-fingerprint-v1;sample={n_bytes_per_tensor}".encode())
    for name in sorted(state):
        value = state[name]
        if isinstance(value, np.ndarray):
            dtype, shape, raw = _sample_bytes_numpy(value, n_bytes_per_tensor)
        elif hasattr(value, "detach"):
            dtype, shape, raw = _sample_bytes_torch(value, n_bytes_per_tensor)
        else:
            continue  # non-tensor entries (e.g. extra state) carry no weights
        h.update(f"\0{name}\0{dtype}\0{shape}\0{len(raw)}\0".encode())
        h.update(raw)
    return h.hexdigest()
