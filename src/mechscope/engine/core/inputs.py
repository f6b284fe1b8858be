"""Text or token ids in, a left-padded batch out: ids, attention mask and position ids.

The one place any input of a pass is read: :meth:`Engine.run`, ``run_with_cache`` and
:meth:`Engine.generate` all take a prompt, a list of prompts of different lengths, token
ids (``[seq]``, ``[batch, seq]``, lists of ints), a padded batch with its attention mask, or
a :class:`Tokens`, and turn it into ids and a mask here. Rows of different lengths are
padded on the left, so position ``-1`` is every row's last token (where logits and direct
logit attribution are read); the attention mask hides the padding and the position ids
count real tokens only, so each row computes what it computes alone (tested against the
unpadded rows).

Ids are checked before any model work, in one line naming the argument: float ids are
refused (never truncated), and so are ids outside the model's vocabulary (negative ones
included), a mask of another shape than its ids, or a row without a real token.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.summary import SummaryRepr

TextOrIds = Any
"""A prompt, prompts, ids ``[seq]`` / ``[batch, seq]`` (a tensor or lists of ints), or
:class:`Tokens` (typed loosely: a union of these reads worse than this sentence)."""


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

    def row(self, i: int) -> list[int]:
        """Row ``i``'s real token ids, without its padding."""
        ids = self.ids[i]
        if self.attention_mask is not None:
            ids = ids[self.attention_mask[i].bool()]
        return [int(t) for t in ids]


def pad_id(lm: LoadedModel) -> int:
    """The tokenizer's padding id (its end-of-text id when it has none; masked anyway)."""
    tok = lm.tokenizer
    for value in (tok.pad_token_id, tok.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def left_pad(rows: Sequence[Sequence[int]], pad: int) -> Tokens:
    """Rows of token ids padded on the left (mask and position ids only when lengths differ)."""
    if not rows:
        raise InputError("expected at least one prompt, got an empty list", field="input")
    for i, r in enumerate(rows):
        if len(r) == 0:
            raise InputError(
                f"expected at least one token in every row, row {i} has none", field="input"
            )
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


def vocab_rows(lm: LoadedModel) -> int:
    """How many token ids the model embeds: valid ids are ``0 … rows - 1``."""
    return int(lm.embed_module().weight.shape[0])


def check_ids(
    lm: LoadedModel, ids: torch.Tensor, *, field: str = "input", check_range: bool = True
) -> torch.Tensor:
    """``ids`` as a long ``[batch, seq]`` tensor (``[seq]`` becomes one row); refused in one
    line where they are not integers, not 1-D or 2-D, empty, or (``check_range``) outside
    the vocabulary."""
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise InputError(
            f"expected integer token ids, got a {str(ids.dtype).removeprefix('torch.')} tensor "
            "(ids are never rounded or truncated: give dtype=torch.long)",
            field=field,
        )
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.numel() == 0:
        raise InputError(
            f"expected token ids [batch, seq] or [seq] with at least one token, got shape "
            f"{list(ids.shape)}",
            field=field,
        )
    if not check_range:
        return ids.long()
    n = vocab_rows(lm)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= n:
        bad = low if low < 0 else high
        row, pos = (int(x) for x in (ids == bad).nonzero()[0])
        raise InputError(
            f"expected token ids in 0..{n - 1} (the vocabulary of {lm.spec}), got {bad} at "
            f"row {row}, position {pos}",
            field=field,
        )
    return ids.long()


def check_mask(mask: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """A ``[batch, seq]`` mask of ``ids`` as long 0/1 (1 = a real token), refused in one line
    where its shape differs from the ids', it holds other values, or a row has no token."""
    mask = torch.as_tensor(mask)
    if list(mask.shape) != list(ids.shape):
        raise InputError(
            f"expected an attention_mask of the ids' shape {list(ids.shape)}, got "
            f"{list(mask.shape)}",
            field="attention_mask",
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise InputError(
            "expected 0 or 1 (1 = a real token) in every entry", field="attention_mask"
        )
    mask = mask.to(ids.device).long()
    empty = (mask.sum(-1) == 0).nonzero().flatten().tolist()
    if empty:
        raise InputError(
            f"expected a real token in every row, row {empty[0]} has none", field="attention_mask"
        )
    return mask


def encode(lm: LoadedModel, text: str, prepend_bos: bool | None = None) -> list[int]:
    """``text``'s token ids. ``prepend_bos``: None keeps the tokenizer's own special tokens
    (what ``tokenizer(text)`` gives); True puts the BOS token first and nothing else; False
    adds no special token."""
    tok = lm.tokenizer
    if prepend_bos is None:
        return list(tok(text)["input_ids"])
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    if prepend_bos:
        if tok.bos_token_id is None:
            raise InputError(
                f"prepend_bos=True, but the tokenizer of {lm.spec} has no BOS token",
                field="prepend_bos",
            )
        ids = [int(tok.bos_token_id), *ids]
    return ids


def _int_row(row: Any, i: int) -> list[int]:
    """A row of token ids as ints, refusing floats and booleans (never truncated)."""
    out = []
    for p, x in enumerate(row):
        if isinstance(x, bool | float):
            raise InputError(
                f"expected integer token ids, got {x!r} at row {i}, position {p}", field="input"
            )
        try:
            out.append(operator.index(x))
        except TypeError:
            raise InputError(
                f"expected integer token ids, got {x!r} at row {i}, position {p}", field="input"
            ) from None
    return out


def _is_ids_row(value: Any) -> bool:
    return not isinstance(value, str | bytes) and isinstance(value, Sequence | torch.Tensor)


def to_tokens(
    lm: LoadedModel,
    inputs: TextOrIds,
    attention_mask: torch.Tensor | None = None,
    *,
    prepend_bos: bool | None = None,
    check_range: bool = True,
) -> Tokens:
    """A prompt, a list of prompts, ids ``[batch, seq]`` / ``[seq]`` (a tensor, lists of ints)
    or :class:`Tokens` as one left-padded batch, checked (module docstring). Text goes
    through the model's tokenizer (:func:`encode`: ``prepend_bos``); ids are taken as they
    are. A given ``attention_mask`` goes with ids; position ids are derived from it.
    ``check_range=False`` leaves ids outside the text vocabulary to the model (a
    multimodal processor's placeholders)."""
    if isinstance(inputs, Tokens):
        if attention_mask is not None:
            raise InputError(
                "Tokens bring their own mask: give attention_mask only with ids",
                field="attention_mask",
            )
        ids = check_ids(lm, inputs.ids, check_range=check_range)
        if inputs.attention_mask is None:
            return Tokens(ids, None, inputs.position_ids)
        mask = check_mask(inputs.attention_mask, ids)
        pos = inputs.position_ids if inputs.position_ids is not None else position_ids(mask)
        return Tokens(ids, mask, pos)
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, torch.Tensor) and hasattr(inputs, "__array__"):
        inputs = torch.as_tensor(inputs)  # a numpy array
    if isinstance(inputs, torch.Tensor):
        ids = check_ids(lm, inputs, check_range=check_range)
        if attention_mask is None:
            return Tokens(ids)
        mask = check_mask(attention_mask, ids)
        if bool(mask.all()):
            return Tokens(ids)
        return Tokens(ids, mask, position_ids(mask))
    if not isinstance(inputs, Sequence):
        raise InputError(
            f"expected text, a list of texts, or token ids, got {type(inputs).__name__}",
            field="input",
        )
    rows = list(inputs)
    if attention_mask is not None:
        raise InputError(
            "expected an attention_mask only with a tensor of ids", field="attention_mask"
        )
    if rows and all(isinstance(r, str) for r in rows):
        tokens = left_pad([encode(lm, text, prepend_bos) for text in rows], pad_id(lm))
        return Tokens(check_ids(lm, tokens.ids), tokens.attention_mask, tokens.position_ids)
    if rows and not any(_is_ids_row(r) or isinstance(r, str) for r in rows):
        rows = [rows]  # one row of ids: [seq]
    if not all(_is_ids_row(r) for r in rows):
        raise InputError("expected text, a list of texts, or token ids (not both)", field="input")
    tokens = left_pad([_int_row(r, i) for i, r in enumerate(rows)], pad_id(lm))
    return Tokens(check_ids(lm, tokens.ids), tokens.attention_mask, tokens.position_ids)


def to_str_tokens(
    lm: LoadedModel, inputs: TextOrIds, *, prepend_bos: bool | None = None
) -> list[str] | list[list[str]]:
    """Each token of ``inputs`` as its own string (``" Mary"``, spaces kept): a list for one
    prompt (a string, ``[seq]`` ids), a list per row for a batch (its real tokens only)."""
    tokens = to_tokens(lm, inputs, prepend_bos=prepend_bos)
    rows = [pieces(lm.tokenizer, tokens.row(i)) for i in range(int(tokens.ids.shape[0]))]
    return rows[0] if is_single(inputs) else rows


def pieces(tok: Any, ids: list[int], window: int = 8) -> list[str]:
    """Each token's text as it reads in context: what decoding it adds after the tokens
    before it (a SentencePiece token's leading space, which it loses decoded alone, is
    kept); the pieces join to the decoded text. A token that ends inside a character
    falls back to its own decoding."""
    out = []
    for i, t in enumerate(ids):
        lo = max(0, i - window)
        before = tok.decode(ids[lo:i], clean_up_tokenization_spaces=False)
        both = tok.decode(ids[lo : i + 1], clean_up_tokenization_spaces=False)
        alone = tok.decode([t], clean_up_tokenization_spaces=False)
        out.append(both[len(before) :] if both.startswith(before) else alone)
    return out


def to_single_token(lm: LoadedModel, string: str) -> int:
    """The id of ``string`` when it is exactly one token (no special tokens added); anything
    else is refused in one line naming its tokens."""
    if not isinstance(string, str):
        raise InputError(f"expected a string, got {type(string).__name__}", field="string")
    ids = list(lm.tokenizer(string, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        raise InputError(
            f"expected one token, got {string!r} = {len(ids)} tokens {pieces(lm.tokenizer, ids)}",
            field="string",
        )
    return int(ids[0])


def is_single(inputs: TextOrIds) -> bool:
    """Whether ``inputs`` is one prompt (a string, ``[seq]`` ids) rather than a batch."""
    if isinstance(inputs, str):
        return True
    if isinstance(inputs, torch.Tensor):
        return inputs.dim() == 1
    if isinstance(inputs, Tokens):
        return False
    return (
        isinstance(inputs, Sequence)
        and bool(inputs)
        and not _is_ids_row(inputs[0])
        and not isinstance(inputs[0], str)
    )
