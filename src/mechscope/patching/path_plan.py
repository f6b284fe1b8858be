"""What path patching checks before any pass, and how many rows its chunks take.

Heads are ``(layer, head)``; receivers of ``k`` or ``v`` are key/value heads. A receiver
reads only what the layers below it wrote, so a cell has a path when one of its receivers
lies above its sender group's lowest layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mechscope.engine.analysis.memory_model import FP32, Dims, Pass, fit_rows, pass_bytes
from mechscope.errors import InputError
from mechscope.patching.config import Head

RECEIVER_INPUTS = ("q", "k", "v", "resid_final")
#: Most rows of one forward.
MAX_ROWS = 512
#: fp32 ``[rows, vocab]`` tensors a chunk's scoring holds beside its logits.
SCORE_ROWS = 3


def check_heads(lm, groups: Sequence[Sequence[Head]], field: str, *, kv: bool = False) -> None:
    """One line naming the first head ``lm`` does not have (``kv``: key/value heads)."""
    if not groups:
        raise InputError("expected at least one head", field=field)
    n = lm.n_kv_heads if kv else lm.n_heads
    what = "key/value head" if kv else "head"
    why = " (k and v exist per key/value head)" if kv else ""
    for group in groups:
        if not group:
            raise InputError("expected at least one head in every group", field=field)
        for layer, head in group:
            if not (0 <= layer < lm.n_layers and 0 <= head < n):
                raise InputError(
                    f"expected heads layer.head with layer 0..{lm.n_layers - 1} and "
                    f"{what} 0..{n - 1}{why}, got {layer}.{head}",
                    field=field,
                )


def first_receiver_layers(
    senders: Sequence[Sequence[Head]], receivers: Sequence[Sequence[Head]]
) -> np.ndarray:
    """``[senders, receivers]``: the lowest receiver layer above the sender group's lowest
    layer (where pass 3 starts editing), -1 where no receiver lies above (no path)."""
    out = np.full((len(senders), len(receivers)), -1, dtype=np.int64)
    for i, s in enumerate(senders):
        low = min(layer for layer, _ in s)
        for j, r in enumerate(receivers):
            above = [layer for layer, _ in r if layer > low]
            out[i, j] = min(above) if above else -1
    return out


def check_path(
    lm, senders: Sequence[Sequence[Head]], receivers: Sequence[Sequence[Head]], receiver_input: str
) -> bool:
    """Refuse in one line what cannot be path-patched; whether the receiver is the final
    residual stream."""
    if receiver_input not in RECEIVER_INPUTS:
        raise InputError(
            f"expected one of {', '.join(RECEIVER_INPUTS)}, got {receiver_input!r}",
            field="receiver_input",
        )
    check_heads(lm, senders, "senders")
    final = receiver_input == "resid_final"
    if not final:
        check_heads(lm, receivers, "receivers", kv=receiver_input in ("k", "v"))
        if (first_receiver_layers(senders, receivers) < 0).all():
            raise InputError(
                "expected a receiver at a layer above a sender's (a head reads only what the "
                "layers below it wrote)",
                field="receivers",
            )
    return final


def head_masks(groups: Sequence[Sequence[Head]], n_layers: int, n_heads: int) -> torch.Tensor:
    mask = torch.zeros(len(groups), n_layers, n_heads, dtype=torch.bool)  # [groups, L, H]
    for g, group in enumerate(groups):
        for layer, head in group:
            mask[g, layer, head] = True
    return mask


@dataclass(frozen=True)
class Sizes:
    """What sizing a sweep depends on: pairs, tokens, the edited tail, what pass 1 keeps."""

    pairs: int
    seq: int
    tail: int  # positions a pass computes (from the earliest first difference on)
    mlps: bool  # pass 1 keeps the clean MLP outputs (freeze_mlps)
    cache: bool  # pass 1 keeps the clean key/value cache (prefix reuse)


def chunk_rows(
    lm, sizes: Sizes, receiver_input: str, n_recv_layers: int, budget_bytes: int | None
) -> tuple[int, int]:
    """Rows of a pass-2 and of a pass-3 chunk within the memory budget, beside pass 1's
    reads: pass 2 keeps the receivers' inputs of its rows (at most half of what is left)
    while pass 3 runs on them."""
    dims = Dims.of(lm)
    e, n_pairs, seq, tail = dims.itemsize, sizes.pairs, sizes.seq, sizes.tail
    z_width = dims.heads * dims.d_head
    width = {"q": z_width, "k": dims.kv_heads * dims.d_head, "v": dims.kv_heads * dims.d_head}
    per_row_bank = tail * width.get(receiver_input, 0) * n_recv_layers * e
    held = 2 * n_pairs * seq * dims.layers * z_width * e
    if sizes.mlps:
        held += n_pairs * seq * dims.layers * dims.d_model * e
    if sizes.cache:
        held += n_pairs * seq * dims.layers * dims.kv_width * e
    budget = budget_bytes or lm.memory_budget
    final = receiver_input == "resid_final"

    def run_bytes(rows: int, width: int, logits: bool) -> int:
        p = Pass(rows=rows, tokens=tail, keys=seq, logits=int(logits), cache=sizes.cache,
                 input_rows=min(rows, n_pairs), gathered=True)  # fmt: skip
        scored = rows * dims.vocab * FP32 * SCORE_ROWS if logits else 0
        return pass_bytes(dims, p) + 2 * rows * tail * width * e + scored  # + gathered values

    def pass2(rows: int) -> int:
        return held + max(
            2 * rows * per_row_bank, rows * per_row_bank + run_bytes(rows, z_width, final)
        )

    rows2 = fit_rows(pass2, budget, MAX_ROWS).rows
    bank = rows2 * per_row_bank

    def pass3(rows: int) -> int:
        return held + bank + run_bytes(rows, width.get(receiver_input, 0), True)

    return rows2, fit_rows(pass3, budget, MAX_ROWS).rows
