"""Contrastive pairs as the batches edge attribution runs: clean and corrupt ids of equal
length, left-padded alike, and each example's answer tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.data.pairs import ContrastivePair, tokenize_pair
from mechscope.errors import InputError


@dataclass(frozen=True)
class EdgeBatch:
    """Examples whose clean and corrupt prompts have the same number of tokens."""

    clean: torch.Tensor  # [b, seq] long, left-padded
    corrupt: torch.Tensor  # [b, seq] long, padded alike
    mask: torch.Tensor  # [b, seq] long: 1 on real tokens
    labels: torch.Tensor  # [b, 2] long: (correct, wrong) token ids
    ids: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.clean.shape[0])

    def rows(self, start: int, stop: int) -> EdgeBatch:
        """Examples ``start … stop − 1``, padded as in the whole batch."""
        return EdgeBatch(
            self.clean[start:stop],
            self.corrupt[start:stop],
            self.mask[start:stop],
            self.labels[start:stop],
            self.ids[start:stop],
        )


def batches(
    pairs: list[ContrastivePair], tokenizer: object, batch_size: int = 8
) -> list[EdgeBatch]:
    """Tokenize ``pairs`` into batches of ``batch_size``; a pair whose prompts differ in
    length is refused in one line (an edge is patched position by position)."""
    if batch_size < 1:
        raise InputError(f"expected batch_size >= 1, got {batch_size}", field="batch_size")
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = int(pad) if pad is not None else 0
    toks = [tokenize_pair(p, tokenizer) for p in pairs]
    for t in toks:
        if not t.same_length:
            raise InputError(
                f"expected clean and corrupt prompts of the same token length, got "
                f"{len(t.clean_ids)} and {len(t.corrupt_ids)}",
                sample=t.id,
                field="corrupt",
            )
    out = []
    for start in range(0, len(toks), batch_size):
        chunk = toks[start : start + batch_size]
        width = max(len(t.clean_ids) for t in chunk)
        clean = torch.full((len(chunk), width), pad, dtype=torch.long)
        corrupt, mask = clean.clone(), torch.zeros_like(clean)
        for i, t in enumerate(chunk):
            n = len(t.clean_ids)
            clean[i, width - n :] = torch.tensor(t.clean_ids)
            corrupt[i, width - n :] = torch.tensor(t.corrupt_ids)
            mask[i, width - n :] = 1
        labels = torch.tensor([[t.correct_id, t.wrong_id] for t in chunk], dtype=torch.long)
        out.append(EdgeBatch(clean, corrupt, mask, labels, tuple(t.id for t in chunk)))
    return out
