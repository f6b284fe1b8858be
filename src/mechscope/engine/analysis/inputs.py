"""Text or token ids in, a left-padded batch out: ids, attention mask and position ids.

A researcher hands ``run_with_cache`` a prompt, a list of prompts of different lengths, or
ids. Rows of different lengths are padded on the left, so position ``-1`` is every row's
last token (where logits and direct logit attribution are read); the attention mask hides
the padding and the position ids count real tokens only, so each row computes what it
computes alone (tested against the unpadded rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.summary import SummaryRepr

TextOrIds = str | Sequence[str] | torch.Tensor | Sequence[Sequence[int]]


@dataclass(frozen=True)
class Tokens(SummaryRepr):
    """A batch ready for :meth:`Engine.run`: ``ids`` ``[batch, seq]``, and, where rows were
    padded, ``attention_mask`` (1 = token) and ``position_ids`` ``[batch, seq]``."""

    ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None

    @property
    def lengths(self) -> list[int]:
        """Real tokens per row."""
        if self.attention_mask is None:
            return [int(self.ids.shape[1])] * int(self.ids.shape[0])
        return [int(n) for n in self.attention_mask.sum(-1)]


def pad_id(lm: LoadedModel) -> int:
    """The tokenizer's padding id (its end-of-text id when it has none; masked anyway)."""
    tok = lm.tokenizer
    for value in (tok.pad_token_id, tok.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def left_pad(rows: Sequence[Sequence[int]], pad: int) -> Tokens:
    """Rows of token ids padded on the left (mask and position ids only when lengths differ)."""
    if not rows or any(len(r) == 0 for r in rows):
        raise InputError("one or more non-empty rows of token ids", field="input")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [batch, seq]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [batch, seq]
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.as_tensor(list(row), dtype=torch.long)
        mask[i, width - len(row) :] = 1
    if bool(mask.all()):
        return Tokens(ids)
    return Tokens(ids, mask, position_ids(mask))


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """``[batch, seq]`` positions counting real tokens only (0 on the padding)."""
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


def to_tokens(
    lm: LoadedModel, inputs: TextOrIds, attention_mask: torch.Tensor | None = None
) -> Tokens:
    """A prompt, a list of prompts, a ``[batch, seq]`` / ``[seq]`` id tensor or a list of id
    lists as one left-padded batch. Text goes through the model's tokenizer as it is (its
    own special tokens, e.g. a BOS, included). A given ``attention_mask`` goes with an id
    tensor; its position ids are derived from it."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, torch.Tensor):
        ids = inputs.long()
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2:
            raise InputError(f"token ids [batch, seq], got shape {list(ids.shape)}", field="input")
        if attention_mask is None or bool(attention_mask.all()):
            return Tokens(ids)
        mask = attention_mask.to(ids.device).long()
        return Tokens(ids, mask, position_ids(mask))
    rows = list(inputs)
    if attention_mask is not None:
        raise InputError("an attention_mask only with a tensor of ids", field="attention_mask")
    if rows and all(isinstance(r, str) for r in rows):
        rows = [lm.tokenizer(text)["input_ids"] for text in rows]
    elif not all(isinstance(r, Sequence) and not isinstance(r, str) for r in rows):
        raise InputError("text, a list of texts, or token ids", field="input")
    return left_pad(rows, pad_id(lm))
