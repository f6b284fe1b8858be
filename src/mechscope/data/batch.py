"""Stack tokenized pairs into padded tensors for batched forwards.

Padding is on the right, so every stored index (answer position, key positions) stays
valid in the padded batch; the attention mask marks real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mechscope.data.pairs import TokenizedPair
from mechscope.errors import InputError

if TYPE_CHECKING:
    import torch


def _pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch  # deferred: loading text data should not pay for importing torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [batch, seq]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [batch, seq]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def collate_pairs(pairs: Sequence[TokenizedPair], *, pad_id: int) -> dict[str, object]:
    """Right-padded batch of pairs.

    Returns ``clean_ids`` / ``corrupt_ids`` ``[batch, seq]``, their ``*_mask``,
    ``answer_pos`` ``[batch, 2]`` (clean, corrupt), ``correct_id`` / ``wrong_id``
    ``[batch]`` and ``positions`` ``{name: [batch, 2]}`` for the span names all pairs share.
    """
    if not pairs:
        raise InputError("expected at least one pair", field="pairs")
    import torch

    clean_ids, clean_mask = _pad([p.clean_ids for p in pairs], pad_id)
    corrupt_ids, corrupt_mask = _pad([p.corrupt_ids for p in pairs], pad_id)
    names = [n for n in pairs[0].positions if all(n in p.positions for p in pairs)]
    return {
        "clean_ids": clean_ids,
        "clean_mask": clean_mask,
        "corrupt_ids": corrupt_ids,
        "corrupt_mask": corrupt_mask,
        "answer_pos": torch.tensor([list(p.answer_pos) for p in pairs], dtype=torch.long),
        "correct_id": torch.tensor([p.correct_id for p in pairs], dtype=torch.long),
        "wrong_id": torch.tensor([p.wrong_id for p in pairs], dtype=torch.long),
        "positions": {
            n: torch.tensor([list(p.positions[n]) for p in pairs], dtype=torch.long) for n in names
        },
        "ids": [p.id for p in pairs],
    }
