"""What a sample *contains*, as a short hash: a resumed run recomputes a sample whose
content changed under the same id.

Shards are named by sample id, so without this an edited continuation or corrupt prompt
kept its old shard and the rerun reported the old numbers as new. The run's config (every
option that changes results) is already checked on resume (:class:`~mechscope.runs.RunDir`);
the key covers the sample itself: every field of a pydantic model or dataclass, recursively,
arrays and tensors by dtype, shape and bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np


def _plain(obj: Any) -> Any:
    """``obj`` as JSON-ready data, deterministically (dict keys sorted by json.dumps)."""
    if hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic
        return _plain(obj.model_dump(mode="json"))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(_plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()
        return {"array": str(obj.dtype), "shape": list(obj.shape), "sha256": digest}
    if type(obj).__module__ == "torch" and hasattr(obj, "detach"):  # a tensor
        return _plain(obj.detach().cpu().numpy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    return repr(obj)


def content_key(obj: Any) -> str:
    """16 hex digits of the sha256 of ``obj``'s content (:func:`_plain`)."""
    text = json.dumps(_plain(obj), sort_keys=True, ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
