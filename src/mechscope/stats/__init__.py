"""Statistics shared by every workflow: bootstrap bands, divergences, agreement, alignment,
rates with Wilson intervals and the exact McNemar test.

Functions here work on results that are already computed (per-sample scalars, per-token
log-probabilities) and never touch a model. Curves get bootstrap confidence intervals with
the sample as the resampling unit; divergences are computed in log space in fp32.
"""

from mechscope.stats.binning import (
    anchor_align,
    first_k,
    nanmean_stack,
    progress_bin_counts,
    progress_bin_index,
    progress_bins,
)
from mechscope.stats.bootstrap import (
    CurveCI,
    cell_ci,
    curve_ci,
    group_curve_cis,
    group_difference_ci,
    mean_ci,
    stratified_curve_ci,
)
from mechscope.stats.correlation import (
    SplitHalf,
    cosine,
    pairwise_pearson_matrix,
    pearson,
    spearman,
    split_half_reliability,
    summary_offdiag,
)
from mechscope.stats.divergences import (
    entropy_from_logp,
    js_from_logp,
    kl_from_logp,
    nll_of_targets,
)
from mechscope.stats.kurtosis import kurtosis_across
from mechscope.stats.multiple import bh_adjust, bh_reject, holm_adjust
from mechscope.stats.proportions import (
    Rate,
    difference_intervals,
    mcnemar_exact,
    pass_rate,
    wilson_intervals,
)

__all__ = [
    "CurveCI",
    "Rate",
    "SplitHalf",
    "anchor_align",
    "bh_adjust",
    "bh_reject",
    "cell_ci",
    "cosine",
    "curve_ci",
    "difference_intervals",
    "entropy_from_logp",
    "first_k",
    "group_curve_cis",
    "group_difference_ci",
    "holm_adjust",
    "js_from_logp",
    "kl_from_logp",
    "kurtosis_across",
    "mcnemar_exact",
    "mean_ci",
    "nanmean_stack",
    "nll_of_targets",
    "pairwise_pearson_matrix",
    "pass_rate",
    "pearson",
    "progress_bin_counts",
    "progress_bin_index",
    "progress_bins",
    "spearman",
    "split_half_reliability",
    "stratified_curve_ci",
    "summary_offdiag",
    "wilson_intervals",
]
