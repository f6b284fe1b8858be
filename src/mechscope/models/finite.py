"""Weights are checked finite when a model loads: a NaN or inf weight is refused in one line
naming the tensor, before any workflow turns it into NaN curves.

The check must cost nothing next to loading: per device and dtype, one fused
``torch._foreach_norm`` pass (what ``clip_grad_norm_`` uses: a multi-tensor kernel on GPUs,
accumulating half-precision tensors in fp32) gives every parameter's L2 norm, and one
host sync reads them all. A NaN or inf anywhere in a tensor makes its norm NaN or inf; no
tensor is copied. A finite fp16 tensor whose norm overflows fp16 is confirmed finite by an
exact check of that tensor alone, in bounded chunks. Parameters on the ``meta`` device
(offloaded by accelerate's ``device_map``) are not in memory and are not checked.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from mechscope.errors import NonFiniteError

#: Elements per chunk of the exact check (a bool mask of this many bytes at a time).
CHUNK = 1 << 24


def nonfinite_weights(model: torch.nn.Module) -> list[tuple[str, int, int, int]]:
    """``(name, n_nan, n_inf, numel)`` of every floating-point parameter holding a NaN or
    an infinity, in parameter order (empty when all are finite)."""
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.Tensor]]] = defaultdict(
        list
    )
    for name, param in model.named_parameters():
        if param.is_floating_point() and param.numel() and param.device.type != "meta":
            groups[(param.device, param.dtype)].append((name, param.detach()))
    suspects: list[tuple[str, torch.Tensor]] = []
    with torch.no_grad():
        for items in groups.values():
            norms = torch.stack(torch._foreach_norm([t for _, t in items]))  # [n_params]
            flagged = (~torch.isfinite(norms)).nonzero().flatten().tolist()  # one sync
            suspects += [items[i] for i in flagged]
    return [found for name, t in suspects if (found := _count(name, t)) is not None]


def _count(name: str, tensor: torch.Tensor) -> tuple[str, int, int, int] | None:
    """Exact NaN and inf counts of one tensor, a chunk at a time (None: all finite)."""
    n_nan = n_inf = 0
    for chunk in tensor.reshape(-1).split(CHUNK):
        n_nan += int(torch.isnan(chunk).sum())
        n_inf += int(torch.isinf(chunk).sum())
    return (name, n_nan, n_inf, tensor.numel()) if n_nan or n_inf else None


def check_finite_weights(model: torch.nn.Module, spec: str) -> None:
    """Refuse ``model`` (loaded from ``spec``) in one line if a weight is NaN or infinite,
    naming the first such tensor and counting the others."""
    bad = nonfinite_weights(model)
    if not bad:
        return
    name, n_nan, n_inf, numel = bad[0]
    more = f" (and {len(bad) - 1} more tensor(s))" if len(bad) > 1 else ""
    raise NonFiniteError(
        f"model {spec}: weight {name} holds {n_nan} NaN and {n_inf} infinite value(s) of "
        f"{numel}{more}; a model with non-finite weights gives NaN results, so it is refused "
        "(a damaged or diverged checkpoint)"
    )
