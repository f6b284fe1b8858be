"""Reading the files layouts are made of, and the one line a missing or bad one gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mechscope.errors import InputError


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object, or one line naming the file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"a readable JSON file, got {err}", field=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("a JSON object", field=str(path))
    return data


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a ``.safetensors`` file, on the CPU."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (OSError, ValueError, RuntimeError) as err:
        raise InputError(f"a readable safetensors file, got {err}", field=str(path)) from None


def read_npz(path: Path) -> dict[str, torch.Tensor]:
    """Every array of a ``.npz`` file as a tensor."""
    import numpy as np

    try:
        with np.load(path) as data:
            return {k: torch.from_numpy(np.array(data[k])) for k in data.files}
    except (OSError, ValueError) as err:
        raise InputError(f"a readable .npz file, got {err}", field=str(path)) from None


def need(tensors: dict[str, torch.Tensor], *names: str, where: Path) -> list[torch.Tensor]:
    """The tensors ``names`` of a file, or one line naming the first missing one."""
    missing = [n for n in names if n not in tensors]
    if missing:
        raise InputError(
            f"tensor {missing[0]!r} (it has {', '.join(sorted(tensors)) or 'none'})",
            field=str(where),
        )
    return [tensors[n] for n in names]
