"""Split a per-sample payload into arrays (npz) and everything else (JSON), and back.

No pickle anywhere: a shard is numbers and text, so reading a run shared by someone
else cannot execute code. The round trip is exact for what it accepts:

- ``np.ndarray`` (any shape, numeric / bool / fixed-width string dtype) → same array;
- numpy scalars (``np.float32(1.5)``) → same scalar type;
- torch tensors → numpy arrays (detached, on CPU);
- ``None``, bool, int, float (NaN included), str, and lists / dicts of these → same
  values (tuples come back as lists).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mechscope.errors import InputError

FORMAT = 1


def _as_numpy(value: Any) -> Any:
    """Torch tensors become numpy arrays; other values pass through."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def _check_plain(value: Any, sample: str, field: str) -> None:
    """Raise unless ``value`` is JSON made of None/bool/int/float/str/list/dict[str, ...]."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_plain(item, sample, field)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(
                    f"string keys in nested dicts, got {key!r}", sample=sample, field=field
                )
            _check_plain(item, sample, field)
        return
    raise InputError(
        f"numpy arrays only as top-level values, else None/bool/int/float/str/list/dict "
        f"(got {type(value).__name__} inside a list or dict)",
        sample=sample,
        field=field,
    )


def split_payload(
    payload: dict[str, Any], sample: str
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Split ``payload`` into (arrays for npz, JSON-able record with the rest + metadata)."""
    if not isinstance(payload, dict):
        raise InputError(f"a dict payload, got {type(payload).__name__}", sample=sample)
    arrays: dict[str, np.ndarray] = {}
    scalar_keys: list[str] = []
    values: dict[str, Any] = {}
    for key, raw in payload.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise InputError(
                f"payload keys that are non-empty strings without '/', got {key!r}", sample=sample
            )
        value = _as_numpy(raw)
        if isinstance(value, np.ndarray | np.generic):
            if value.dtype.hasobject:
                raise InputError(
                    "a numeric, bool or string array (object arrays need pickle)",
                    sample=sample,
                    field=key,
                )
            if isinstance(value, np.generic):
                scalar_keys.append(key)
            arrays[key] = np.asarray(value)
        else:
            _check_plain(value, sample, key)
            values[key] = value
    record = {
        "format": FORMAT,
        "sample_id": sample,
        "keys": list(payload),  # original key order
        "arrays": list(arrays),
        "scalars": scalar_keys,
        "values": values,
    }
    return arrays, record


def join_payload(record: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Rebuild the payload from its JSON record and its arrays, in the original key order."""
    scalars = set(record.get("scalars", []))
    out: dict[str, Any] = {}
    for key in record["keys"]:
        if key in arrays:
            out[key] = arrays[key][()] if key in scalars else arrays[key]
        else:
            out[key] = record["values"][key]
    return out
