"""The placement options of :func:`mechscope.models.load_model` (``device``, ``device_map``,
``threads``, ``memory``), checked in one line each before any file is read."""

from __future__ import annotations

import torch

from mechscope.errors import InputError
from mechscope.models.memory import parse_memory


def check_placement(device: str | torch.device | None, threads: int | None, memory: str | None):
    """One-line errors for placement options, before any file is read."""
    if threads is not None and threads < 1:
        raise InputError(f"expected a positive number of threads, got {threads}", field="threads")
    if memory is not None:
        parse_memory(memory)
    if device is not None:
        check_device(device)


def check_device(device: str | torch.device, *, field: str = "device") -> torch.device:
    """``device`` as a torch device, refused in one line where it cannot be used here (a
    name torch does not know, CUDA without CUDA, a CUDA index this machine lacks)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InputError(
            f"expected a device like cpu, cuda or cuda:1, got {device!r}", field=field
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"{str(device)!r} requested, but no CUDA device is available here", field=field
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise InputError(
                f"{str(device)!r} requested, but this machine has {count} CUDA device(s): "
                f"cuda:0..cuda:{count - 1}",
                field=field,
            )
    return dev


#: The placement strategies accelerate's ``device_map`` takes by name.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(device_map: str | dict | None, *, spec: str, device: object) -> None:
    """Refuse a ``device_map`` that would be ignored or fail deep in accelerate: on a
    ``tiny:`` model (built in memory, never dispatched), together with ``device`` (which
    then has no effect), or a name that is neither a strategy nor a device."""
    if device_map is None or isinstance(device_map, dict):
        return
    if spec.startswith("tiny:"):
        raise InputError(
            f"--device-map only for a model loaded from files; {spec} is built in memory "
            "(use --device)",
            field="device_map",
        )
    if device is not None:
        raise InputError("either --device or --device-map, not both", field="device_map")
    if device_map in DEVICE_MAPS:
        return
    try:
        torch.device(device_map)
    except (RuntimeError, TypeError):
        raise InputError(
            f"expected {', '.join(DEVICE_MAPS)} or a device such as cpu or cuda:0, "
            f"got {device_map!r}",
            field="device_map",
        ) from None
