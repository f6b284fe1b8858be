"""Causal consistency: does the student respond to the same interventions as the teacher?

At a checkpoint (layer ``l``, key position ``t``) the clean run is patched with the value the
*same* model computes there on the corrupt prompt (activation patching, Pearl's do), and the
causal effect is ``Δ = LD(clean) - LD(patched)`` with ``LD = logit[correct] - logit[wrong]``.
The teacher's effects Δ_T use its checkpoint layer, the student's Δ_S its mapped layer and
its *own* corrupt value. Consistency is ``Pearson(Δ_T, Δ_S)`` over pairs, per checkpoint and
pooled over all (checkpoint, pair) effects.
"""

from __future__ import annotations

import itertools
import math
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


#: Permutations or splits beyond which the reference levels are estimated from this many
#: random draws instead of enumerated.
N_DRAWS = 200


def _derangements(k: int, seed: int) -> list[tuple[int, ...]]:
    """Every permutation of ``range(k)`` that moves each checkpoint (``k ≤ 6``: at most 265),
    else ``N_DRAWS`` random ones."""
    if k <= 6:
        return [p for p in itertools.permutations(range(k)) if all(p[i] != i for i in range(k))]
    rng, out = np.random.default_rng(seed), []
    while len(out) < N_DRAWS:
        p = rng.permutation(k)
        if (p != np.arange(k)).all():
            out.append(tuple(int(i) for i in p))
    return out


def shuffled_consistency(
    delta_t: torch.Tensor | np.ndarray, delta_s: torch.Tensor | np.ndarray, *, seed: int = 0
) -> tuple[float, float]:
    """``(pooled, per-checkpoint mean)`` consistency with the teacher→student mapping
    permuted: teacher checkpoint ``k`` read against the student's effects at the site of
    checkpoint ``π(k) ≠ k``, averaged over permutations π that move every checkpoint.

    Why: the pooled Pearson rewards a student whose checkpoints' mean effects are ordered
    like the teacher's, whatever happens at each site; a consistency no higher than with
    the sites swapped says the student does not respond *where* the teacher does. NaN for
    one checkpoint (nothing to permute).
    """
    t = np.asarray(delta_t, dtype=np.float64)  # [K, N]
    s = np.asarray(delta_s, dtype=np.float64)  # [K, N]
    perms = _derangements(t.shape[0], seed)
    if not perms:
        return float("nan"), float("nan")
    pooled, means = [], []
    for p in perms:
        per, r = causal_consistency(t, s[list(p)])
        pooled.append(r)
        means.append(np.nanmean(per) if np.isfinite(per).any() else np.nan)
    return float(np.nanmean(pooled)), float(np.nanmean(means))


def split_half_ceiling(delta_t: torch.Tensor | np.ndarray, *, seed: int = 0) -> tuple[float, float]:
    """``(split-half r, Spearman–Brown r)`` of the teacher with itself: the Pearson between
    its checkpoints' mean effects ``[K]`` on one half of the test pairs and on the other,
    averaged over splits (every split where there are at most ``N_DRAWS``), and that value
    stepped up to the full pair count, ``2r / (1 + r)``.

    Why: the teacher is deterministic, so on the *same* pairs it agrees with itself
    exactly; what pair sampling leaves uncertain is the teacher's profile over checkpoints,
    which is what the pooled consistency mostly reads. A student's consistency above this
    ceiling is read off the pairs drawn, not the mechanism. NaN for fewer than three
    checkpoints or four pairs.
    """
    t = np.asarray(delta_t, dtype=np.float64)  # [K, N]
    k, n = t.shape
    if k < 3 or n < 4:
        return float("nan"), float("nan")
    half = n // 2
    if math.comb(n, half) <= N_DRAWS:
        splits = [np.array(a) for a in itertools.combinations(range(n), half)]
    else:
        rng = np.random.default_rng(seed)
        splits = [rng.permutation(n)[:half] for _ in range(N_DRAWS)]
    rs = []
    for a in splits:
        b = np.setdiff1d(np.arange(n), a)
        ma, mb = t[:, a].mean(1), t[:, b].mean(1)  # [K]
        if np.ptp(ma) > 0 and np.ptp(mb) > 0:
            rs.append(float(np.corrcoef(ma, mb)[0, 1]))
    if not rs:
        return float("nan"), float("nan")
    r = float(np.mean(rs))
    return r, 2 * r / (1 + r) if r > -1 else float("nan")
