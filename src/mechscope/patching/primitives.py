"""Read and Write primitives on batches of pairs, as distillation uses them.

*Read*: the contrastive difference ``d = h_clean - h_corrupt`` at one (layer, position)
of the residual stream. *Write*: the causal effect of patching the corrupt value into the
clean run there, ``logit_diff(original) - logit_diff(patched)`` (Pearl's do-operator).
Both take right-padded batches (``attention_mask``) with one position per row, and the
causal effect runs the original and the patched clean rows in one forward.
"""

from __future__ import annotations

import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel


def _positions(pos: int | torch.Tensor, batch: int, seq: int, field: str) -> torch.Tensor:
    raw = torch.as_tensor(pos, dtype=torch.long).reshape(-1)
    if raw.numel() == 1:
        raw = raw.expand(batch)
    p = raw
    if raw.numel() != batch:
        raise InputError(
            f"expected one position or {batch} positions, got {raw.numel()}", field=field
        )
    p = torch.where(p < 0, p + seq, p)
    bad = torch.nonzero((p < 0) | (p >= seq)).flatten()
    if bad.numel():
        row = int(bad[0])
        raise InputError(
            f"expected a position in -{seq}..{seq - 1}, got {int(raw[row])}",
            sample=f"row {row}",
            field=field,
        )
    return p


def _engine(eng: Engine | LoadedModel) -> Engine:
    return eng if isinstance(eng, Engine) else Engine.of(eng)


def _read(
    eng: Engine, ids: torch.Tensor, site: Site, mask: torch.Tensor | None, pos: torch.Tensor
) -> torch.Tensor:
    out = eng.run(ids, [Read(site)], attention_mask=mask, logits=False)
    act = out.reads[site]  # [batch, seq, ...]
    return act[torch.arange(act.shape[0]), pos.to(act.device)]  # [batch, ...]


def contrastive_difference(
    eng: Engine | LoadedModel,
    clean_ids: torch.Tensor,  # [batch, seq]
    corrupt_ids: torch.Tensor,  # [batch, seq']
    layer: int,
    pos: int | torch.Tensor,
    *,
    corrupt_pos: int | torch.Tensor | None = None,
    site: str = "resid_post",
    clean_mask: torch.Tensor | None = None,
    corrupt_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``h_clean[pos] - h_corrupt[corrupt_pos]`` at ``site`` of ``layer``: ``[batch, d_model]``
    (``corrupt_pos`` defaults to ``pos``; both may be one int or one index per row)."""
    eng = _engine(eng)
    b = clean_ids.shape[0]
    p = _positions(pos, b, clean_ids.shape[1], "pos")
    q = _positions(
        pos if corrupt_pos is None else corrupt_pos, b, corrupt_ids.shape[1], "corrupt_pos"
    )
    s = Site(site, layer)
    h_clean = _read(eng, clean_ids, s, clean_mask, p)
    h_corrupt = _read(eng, corrupt_ids, s, corrupt_mask, q)
    return h_clean.float() - h_corrupt.float()  # [batch, d_model]


def causal_effect(
    eng: Engine | LoadedModel,
    clean_ids: torch.Tensor,  # [batch, seq]
    corrupt_ids: torch.Tensor,  # [batch, seq']
    layer: int,
    pos: int | torch.Tensor,
    answer_pos: int | torch.Tensor,
    correct_ids: torch.Tensor,  # [batch]
    wrong_ids: torch.Tensor,  # [batch]
    *,
    corrupt_pos: int | torch.Tensor | None = None,
    site: str = "resid_post",
    clean_mask: torch.Tensor | None = None,
    corrupt_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``logit_diff(clean) - logit_diff(clean with site[layer, pos] := corrupt value)``,
    fp32 ``[batch]``; logit differences are read at ``answer_pos`` of the clean prompt."""
    eng = _engine(eng)
    b, seq = clean_ids.shape
    p = _positions(pos, b, seq, "pos")
    a = _positions(answer_pos, b, seq, "answer_pos")
    q = _positions(
        pos if corrupt_pos is None else corrupt_pos, b, corrupt_ids.shape[1], "corrupt_pos"
    )
    s = Site(site, layer)
    value = _read(eng, corrupt_ids, s, corrupt_mask, q)  # [batch, d_model]
    full = torch.zeros(
        2 * b, seq, *value.shape[1:], dtype=value.dtype, device=value.device
    )  # [2b, seq, d]
    mask = torch.zeros(2 * b, seq, dtype=torch.bool, device=value.device)
    rows = torch.arange(b, 2 * b)
    full[rows, p.to(value.device)] = value
    mask[rows, p.to(value.device)] = True
    ids = torch.cat([clean_ids, clean_ids])  # rows < b: original, rows >= b: patched
    attn = None if clean_mask is None else torch.cat([clean_mask, clean_mask])
    keep = torch.unique(a)
    out = eng.run(ids, [Patch(s, full, mask=mask)], attention_mask=attn, logits=keep)
    col = torch.searchsorted(keep, a).repeat(2)
    logits = out.logits[torch.arange(2 * b), col.to(out.logits.device)].float()  # [2b, vocab]
    idx = torch.arange(2 * b, device=logits.device)
    c, w = correct_ids.repeat(2).to(logits.device), wrong_ids.repeat(2).to(logits.device)
    ld = logits[idx, c] - logits[idx, w]  # [2b]
    return ld[:b] - ld[b:]
