"""Causal consistency: does the student respond to the same interventions as the teacher?

At a checkpoint (layer ``l``, key position ``t``) the clean run is patched with the value the
*same* model computes there on the corrupt prompt (activation patching, Pearl's do), and the
causal effect is ``Δ = LD(clean) - LD(patched)`` with ``LD = logit[correct] - logit[wrong]``.
The teacher's effects Δ_T use its checkpoint layer, the student's Δ_S its mapped layer and
its *own* corrupt value. Consistency is ``Pearson(Δ_T, Δ_S)`` over pairs, per checkpoint and
pooled over all (checkpoint, pair) effects.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mechscope.distill.pairset import PairSet
from mechscope.distill.passes import (
    answer_logits,
    patched_logit_diffs,
    read_resid,
    require_finite_clean,
)
from mechscope.engine import Engine
from mechscope.engine.core.unembed import logit_diff
from mechscope.errors import InputError
from mechscope.stats import pearson
from mechscope.stats.finite import require_finite


@torch.no_grad()
def causal_effects(
    eng: Engine, data: PairSet, sites: Sequence[tuple[int, int]], *, batch_size: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Effects of patching each ``(layer, position index)`` site, for every pair.

    Returns ``(delta [K, N], clean_ld [N])`` in fp32: per site and pair, the clean logit
    difference minus the patched one. Per batch, one clean and one corrupt pass read all
    needed layers, and one pass of ``K × batch`` rows patches every site
    (:func:`~mechscope.distill.passes.patched_logit_diffs`).
    """
    if not sites:
        raise InputError("expected at least one site", field="sites")
    last = eng.lm.n_layers - 1
    layers = sorted({layer for layer, _ in sites})
    deltas, clean_lds = [], []
    for start in range(0, len(data), batch_size):
        b = data.subset(range(start, min(start + batch_size, len(data))))
        hc = read_resid(eng, b.clean, b.clean_mask, [last])
        ld = logit_diff(answer_logits(eng, hc[last], b.answer[:, 0]), b.correct, b.wrong).cpu()
        hk = read_resid(eng, b.corrupt, b.corrupt_mask, layers)
        deltas.append(ld - patched_logit_diffs(eng, b, sites, hk))  # [K, b]
        clean_lds.append(ld)
    delta, clean_ld = torch.cat(deltas, dim=1), torch.cat(clean_lds)
    _require_finite(eng, data, sites, delta, clean_ld)
    return delta, clean_ld


def _require_finite(
    eng: Engine,
    data: PairSet,
    sites: Sequence[tuple[int, int]],
    delta: torch.Tensor,  # [K, N]
    clean_ld: torch.Tensor,  # [N]
) -> None:
    """Refuse effects that are not finite, naming the pair: where its clean pass is not
    finite, the first layer whose output is not; else the first patched site's layer."""
    require_finite_clean(eng, data, clean_ld)
    columns = (~torch.isfinite(delta)).any(dim=0).nonzero().flatten().tolist()
    if columns:
        require_finite(
            delta[:, columns[0]].numpy(),
            "the patched logit difference",
            sample=data.ids[columns[0]],
            layers=[layer for layer, _ in sites],
        )


def causal_consistency(
    delta_t: torch.Tensor | np.ndarray, delta_s: torch.Tensor | np.ndarray
) -> tuple[np.ndarray, float]:
    """``(per-checkpoint Pearson [K], pooled Pearson)`` of teacher vs student effects.

    ``delta_t``/``delta_s``: ``[K, N]``. A checkpoint whose effects are constant on either
    side gives NaN (no correlation is defined); the pooled value uses every effect. A NaN
    or infinite effect is refused (:func:`~mechscope.stats.pearson`).
    """
    t = np.asarray(delta_t, dtype=np.float64)
    s = np.asarray(delta_s, dtype=np.float64)
    if t.shape != s.shape or t.ndim != 2:
        raise InputError(
            f"expected two [K, N] arrays of one shape, got {t.shape} and {s.shape}", field="delta_s"
        )
    per = np.array([pearson(t[k], s[k]) for k in range(t.shape[0])])
    return per, pearson(t.ravel(), s.ravel())
