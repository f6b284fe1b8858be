"""Forward inputs of a paired sample, as run or position-matched.

Two conditions usually have prefixes of different lengths, so the same continuation token
sits at different absolute positions. For models with absolute position embeddings (and,
numerically, for rotary ones) that is a confound. The position-matched control left-pads the
shorter prefix with pad tokens (attention mask 0) and passes explicit ``position_ids``
``0 .. S-1``, so every continuation token has the same position id in both conditions. Many
Hugging Face models derive position ids from the attention mask (real tokens from 0), which
would silently undo the shift; explicit ids prevent that, and :func:`check_positions` fails
loudly if the first semantic token's position ids still differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.errors import InputError
from mechscope.lens.prepare import TokenizedCondition


@dataclass(frozen=True)
class ForwardInput:
    """What one condition's forward pass gets."""

    ids: torch.Tensor  # [1, seq]
    attention_mask: torch.Tensor | None  # [1, seq] (1 = token, 0 = pad) or None
    position_ids: torch.Tensor | None  # [1, seq] or None (the model's default 0 .. seq-1)
    pad: int  # number of left pad tokens

    @property
    def length(self) -> int:
        return int(self.ids.shape[1])

    def position_of(self, index: int) -> int:
        """Position id of token ``index`` of the unpadded sequence."""
        at = index + self.pad
        return int(self.position_ids[0, at]) if self.position_ids is not None else at


def as_run(cond: TokenizedCondition) -> ForwardInput:
    """The condition exactly as given: no padding, default positions."""
    return ForwardInput(torch.tensor([cond.ids]), None, None, 0)


def left_padded(cond: TokenizedCondition, pad: int, pad_id: int) -> ForwardInput:
    """``pad`` pad tokens on the left, masked out, with explicit position ids 0 .. seq-1."""
    ids = torch.tensor([[pad_id] * pad + cond.ids])  # [1, seq]
    mask = torch.ones_like(ids)
    mask[:, :pad] = 0
    positions = torch.arange(ids.shape[1])[None]  # [1, seq]
    return ForwardInput(ids, mask, positions, pad)


def position_matched(
    a: TokenizedCondition, b: TokenizedCondition, pad_id: int
) -> tuple[ForwardInput, ForwardInput]:
    """Inputs for A and B with the continuation at the same positions: the condition with the
    shorter prefix (B in the usual A = longer setup) is left-padded."""
    shift = a.cont_start - b.cont_start
    return left_padded(a, max(-shift, 0), pad_id), left_padded(b, max(shift, 0), pad_id)


def check_positions(
    sample: str,
    a: tuple[str, ForwardInput, TokenizedCondition],
    b: tuple[str, ForwardInput, TokenizedCondition],
    first_semantic: int,
) -> None:
    """Raise if the first semantic continuation token has different position ids."""
    pos = [inp.position_of(cond.cont_start + first_semantic) for _, inp, cond in (a, b)]
    if pos[0] != pos[1]:
        raise InputError(
            f"expected the first semantic continuation token at the same position "
            f"id in both conditions, got {a[0]}: {pos[0]}, {b[0]}: {pos[1]}",
            sample=sample,
            field="position_ids",
        )
