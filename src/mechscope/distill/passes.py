"""Forward passes distillation needs, all through the engine (reads and patches of sites).

One pass per prompt condition: a clean run and a corrupt run read every residual layer
they need at once; answer logits come from the logit lens of the last layer's
``resid_post`` at each row's answer position, so the ``[batch, seq, vocab]`` logits of all
positions are never built.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.distill.pairset import PairSet
from mechscope.engine import Engine, Patch, Read, Site


def read_resid(
    eng: Engine, ids: torch.Tensor, mask: torch.Tensor, layers: Sequence[int], *, grad: bool = False
) -> dict[int, torch.Tensor]:
    """``resid_post`` of ``layers`` for right-padded ``ids [b, s]``: ``{layer: [b, s, d]}``."""
    sites = {layer: Site("resid_post", layer) for layer in sorted(set(layers))}
    out = eng.run(
        ids, [Read(s) for s in sites.values()], attention_mask=mask, logits=False, grad=grad
    )
    return {layer: out.reads[s] for layer, s in sites.items()}


def gather_rows(h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``h [b, s, d]`` at one position per row ``pos [b]`` -> ``[b, d]``."""
    return h[torch.arange(h.shape[0], device=h.device), pos.to(h.device)]


def answer_logits(eng: Engine, final_h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Logits at each row's answer position from the last layer: ``[b, vocab]`` fp32."""
    return eng.unembed(gather_rows(final_h, pos))


def logit_diff(logits: torch.Tensor, correct: torch.Tensor, wrong: torch.Tensor) -> torch.Tensor:
    """``logit[correct] - logit[wrong]`` per row: ``[b]`` fp32."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    lg = logits.float()
    return lg[rows, correct.to(lg.device)] - lg[rows, wrong.to(lg.device)]


@torch.no_grad()
def clean_logit_diffs(eng: Engine, data: PairSet, batch_size: int = 16) -> torch.Tensor:
    """Clean-prompt logit difference (correct − wrong) of every pair: ``[N]`` fp32 (CPU)."""
    last = eng.lm.n_layers - 1
    out = []
    for start in range(0, len(data), batch_size):
        b = data.subset(range(start, min(start + batch_size, len(data))))
        h = read_resid(eng, b.clean, b.clean_mask, [last])[last]
        out.append(logit_diff(answer_logits(eng, h, b.answer[:, 0]), b.correct, b.wrong).cpu())
    return torch.cat(out)


@torch.no_grad()
def patched_logit_diffs(
    eng: Engine, b: PairSet, layer: int, pos_index: int, corrupt_h: torch.Tensor
) -> torch.Tensor:
    """Clean run with ``resid_post[layer]`` at key position ``pos_index`` replaced, row by
    row, by ``corrupt_h [b, d]`` (the same model's value in its corrupt run): ``[b]``."""
    rows = torch.arange(len(b))
    at = b.positions[:, pos_index, 0]  # [b] clean index of the key position
    n, s = b.clean.shape
    value = torch.zeros(n, s, corrupt_h.shape[-1], dtype=corrupt_h.dtype)  # [b, s, d]
    value[rows, at] = corrupt_h.cpu()
    mask = torch.zeros(n, s, dtype=torch.bool)  # [b, s]
    mask[rows, at] = True
    last = eng.lm.n_layers - 1
    patch = Patch(Site("resid_post", layer), value=value, mask=mask)
    final = Site("resid_post", last)
    out = eng.run(b.clean, [patch, Read(final)], attention_mask=b.clean_mask, logits=False)
    return logit_diff(
        answer_logits(eng, out.reads[final], b.answer[:, 0]), b.correct, b.wrong
    ).cpu()
