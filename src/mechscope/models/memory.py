"""The memory budget batched work is sized by: given, or a share of the device's free memory.

Sweeps, readouts and integrated-gradient paths pack many rows into one forward; how many is
decided by a byte budget (:mod:`mechscope.engine.analysis.sweep`). ``--memory`` /
``load_model(memory=)`` / ``$MECHSCOPE_MEMORY`` give it as an amount (``8GiB``, ``500MB``, a
plain number of bytes) or as a share of the device's free memory (a number in (0, 1]). The
default is 0.4 of the free memory when the model loads: on a GPU that is what is left beside
the weights; on the CPU it is capped at 2 GiB, because beyond that bigger batches no longer
run faster there and only raise the peak.
"""

from __future__ import annotations

import os
import re

import torch

from mechscope.errors import InputError

DEFAULT_SHARE = 0.4
CPU_CAP = 2 * 2**30
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def free_bytes(device: torch.device) -> int:
    """Free memory on ``device``: CUDA's free memory, or the host's available memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def parse_memory(text: str) -> tuple[str, float]:
    """``("bytes", n)`` for an amount, ``("share", s)`` for a share of free memory."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise InputError(
            f"expected an amount like 8GiB or 500MB, or a share of free memory like 0.5; "
            f"got {text!r}",
            field="memory",
        )
    value, unit = float(m.group(1)), m.group(2).lower()
    if not unit and 0 < value <= 1:
        return "share", value
    if value * _UNITS[unit] < 2**20:
        raise InputError(f"expected at least 1 MiB, got {text!r}", field="memory")
    return "bytes", value * _UNITS[unit]


def human_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit it reaches (``"512 B"``, ``"1.00 MiB"``,
    ``"3.25 GiB"``): :func:`parse_memory` reads it back. A budget of 1 MiB printed in GiB
    would read 0.00."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def memory_budget(text: str | None, device: torch.device) -> int:
    """The budget in bytes for work on ``device`` (see the module docstring)."""
    if text is None:
        legacy = os.environ.get("MECHSCOPE_MEMORY_BUDGET_GB")
        text = f"{legacy}GiB" if legacy else os.environ.get("MECHSCOPE_MEMORY")
    if text is None:
        budget = int(DEFAULT_SHARE * free_bytes(device))
        return min(budget, CPU_CAP) if device.type != "cuda" else budget
    kind, value = parse_memory(text)
    if kind == "share":
        return int(value * free_bytes(device))
    return int(value)
