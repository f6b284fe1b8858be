"""The evaluation metrics of a dictionary, as sums per context and their definitions.

Over the evaluated tokens (every position of a context but its BOS), with ``x`` the site's
activation (a transcoder's target: the MLP's output), ``x̂`` the dictionary's
reconstruction, ``f`` the feature activations and ``N`` the number of tokens:

- ``explained_variance = 1 − E‖x − x̂‖² / (E‖x‖² − ‖E x‖²)``: against the variance around
  the mean. SAELens before 6.x divided by ``E‖x‖²`` (against zero), which the residual
  stream's large mean makes look better than it is (SAELens issue #665); its current
  ``ExplainedVarianceCalculator`` computes this one;
- ``mse = E‖x − x̂‖²`` (summed over dimensions, averaged over tokens: SAELens's);
- ``cossim = E[cos(x, x̂)]``; ``l0 = E[#{i: f_i ≠ 0}]``, ``l1 = E[Σ|f_i|]``;
- ``ce_loss_score = (CE_ablated − CE_spliced) / (CE_ablated − CE_clean)``: the fraction of
  the loss lost by ablating the site that the splice recovers, with the site zero-ablated
  (``ce_loss_score``, SAELens's) and mean-ablated (``ce_loss_score_mean``, the site's mean
  over the evaluated tokens); CE is the next-token cross-entropy at every position whose
  site was replaced (its prediction of the next token);
- ``kl_div_with_sae = E[KL(p_clean ‖ p_spliced)]`` of the next-token distributions, and
  ``kl_div_score = (KL_zero − KL_spliced) / KL_zero`` (SAELens's);
- ``dead`` and ``dense``: the fractions of features that never fire, or fire on more than
  ``dense_threshold`` of the tokens.

Every ratio is a ratio of means over all tokens (not a mean of per-context ratios), and its
95 % interval resamples contexts (tokens of one context are not independent): a percentile
bootstrap of the same ratio (:func:`scipy.stats.bootstrap`, paired over the per-context
sums). ``dead`` and ``dense`` get no interval (a resample can only lose features).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from scipy import stats

#: Per-context sums kept for each dictionary (``sum_x`` is ``[contexts, d]``).
SUM_KEYS = ("n", "sse", "ssq", "cos", "l0", "l1")
CE_KEYS = ("n_ce", "ce_clean", "ce_sae", "ce_zero", "ce_mean", "kl_sae", "kl_zero", "kl_mean")
METRICS = (
    "explained_variance",
    "mse",
    "cossim",
    "l0",
    "l1",
    "ce_loss_score",
    "ce_loss_score_mean",
    "ce_loss_with_sae",
    "ce_loss_without_sae",
    "ce_loss_with_ablation",
    "ce_loss_with_mean_ablation",
    "kl_div_with_sae",
    "kl_div_score",
    "dead",
    "dense",
)


def reconstruction_sums(
    x: torch.Tensor, x_hat: torch.Tensor, f: torch.Tensor
) -> dict[str, np.ndarray]:
    """Per-context sums of one batch: ``x``, ``x_hat`` ``[b, T, d]`` and ``f [b, T, d_sae]``
    at the evaluated tokens (BOS already dropped). float64 on the host."""
    x, x_hat, f = x.double(), x_hat.double(), f.double()
    err = (x - x_hat).pow(2).sum(-1)  # [b, T]
    cos = torch.nn.functional.cosine_similarity(x, x_hat, dim=-1)  # [b, T]
    out = {
        "n": torch.full((x.shape[0],), float(x.shape[1]), dtype=torch.float64),
        "sse": err.sum(-1),
        "ssq": x.pow(2).sum((-1, -2)),
        "cos": cos.sum(-1),
        "l0": (f != 0).sum((-1, -2)).double(),
        "l1": f.abs().sum((-1, -2)),
        "sum_x": x.sum(1),  # [b, d]
        "fires": (f != 0).sum(1).double(),  # [b, d_sae]
    }
    return {k: v.numpy() for k, v in out.items()}


def next_token_ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[b, T − 1]`` fp32: the cross-entropy of each next token, ``logits [b, T, V]``."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, ids[:, 1:, None].to(logp.device)).squeeze(-1)


def kl_rows(logp_clean: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``[...]``: KL(clean ‖ other) per position, from clean log-probabilities and the other
    pass's logits (fp32, in log space)."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    p = logp_clean.exp()
    return (p * (logp_clean - logq)).sum(-1).clamp_min(0.0)


def _ratio_stats(s: Mapping[str, np.ndarray], dense_threshold: float) -> dict[str, float]:
    """Every metric from sums over contexts (axis 0 already summed)."""
    n = s["n"]
    mean_x = s["sum_x"] / n
    variance = s["ssq"] / n - float(mean_x @ mean_x)
    out = {
        "explained_variance": 1.0 - (s["sse"] / n) / variance,
        "mse": s["sse"] / n,
        "cossim": s["cos"] / n,
        "l0": s["l0"] / n,
        "l1": s["l1"] / n,
    }
    if "n_ce" in s and s["n_ce"] > 0:
        m = s["n_ce"]
        clean, sae, zero, mean = (s[k] / m for k in ("ce_clean", "ce_sae", "ce_zero", "ce_mean"))
        out.update(
            ce_loss_score=(zero - sae) / (zero - clean),
            ce_loss_score_mean=(mean - sae) / (mean - clean),
            ce_loss_with_sae=sae,
            ce_loss_without_sae=clean,
            ce_loss_with_ablation=zero,
            ce_loss_with_mean_ablation=mean,
            kl_div_with_sae=s["kl_sae"] / m,
            kl_div_score=(s["kl_zero"] - s["kl_sae"]) / s["kl_zero"],
        )
    fires = s["fires"] / n
    out["dead"] = float((fires == 0).mean())
    out["dense"] = float((fires > dense_threshold).mean())
    return {k: float(v) for k, v in out.items()}


def summarize(
    per_context: Mapping[str, np.ndarray],
    *,
    dense_threshold: float = 0.1,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float, float, float]]:
    """``metric -> (value, low, high)``: each metric over every context, with its 95 %
    bootstrap interval resampling contexts (module docstring)."""
    totals = {k: np.asarray(v).sum(0) for k, v in per_context.items()}
    values = _ratio_stats(totals, dense_threshold)
    n_ctx = len(per_context["n"])
    if n_ctx < 2:
        return {k: (v, np.nan, np.nan) for k, v in values.items()}
    keys = [k for k in values if k not in ("dead", "dense")]
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in per_context.items() if k != "fires"}

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)  # [..., n_ctx] resampled context indices
        flat = idx.reshape(-1, idx.shape[-1])
        rows = []
        for one in flat:
            sums = {k: v[one].sum(0) for k, v in arrays.items()}
            sums["fires"] = np.zeros(1)
            rows.append([_ratio_stats(sums, dense_threshold)[k] for k in keys])
        out = np.asarray(rows)  # [resamples, metrics]
        return np.moveaxis(out.reshape(*idx.shape[:-1], len(keys)), -1, 0)

    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            (np.arange(n_ctx),), statistic, n_resamples=n_resamples, vectorized=True,
            method="percentile", rng=np.random.default_rng(seed), confidence_level=0.95,
        )  # fmt: skip
    low, high = (
        np.atleast_1d(res.confidence_interval.low),
        np.atleast_1d(res.confidence_interval.high),
    )
    out = {k: (values[k], float(low[i]), float(high[i])) for i, k in enumerate(keys)}
    out.update({k: (values[k], np.nan, np.nan) for k in ("dead", "dense")})
    return {k: out[k] for k in values}
