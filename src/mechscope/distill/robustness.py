"""Experiment 3: do students that keep more of the mechanism lose less accuracy out of
distribution? One point per distilled student (every trained trial; the untrained student
is the reference, not a distilled student), per task.

The correlation is Pearson's r with two 95 % intervals:

- **Fisher z** (``scipy.stats.pearsonr(...).confidence_interval()``): ``tanh(atanh r ±
  z_{0.975} / sqrt(n − 3))``, exact for independent bivariate-normal points;
- **bootstrap over students** (``scipy.stats.bootstrap``, paired resampling, BCa): no
  normality assumption. OOD degradation is a difference of two accuracies on 32–64 pairs,
  so it is discrete and can be far from normal; where the two intervals disagree, the
  bootstrap is the one to trust.

Neither removes what the students share: trials of one method are not independent draws,
so either interval is optimistic when the points cluster by method. The **cluster
bootstrap** (:func:`~mechscope.distill.resample.cluster_pearson_interval`: methods drawn
with replacement, then students within each drawn method) is the interval the table
reports; the two above stay in the stored table for comparison. Spearman's rho (with
its p-value) checks that one cluster does not make the correlation alone, and the
**partial** correlation given test accuracy checks it is not accuracy speaking: a student
near chance cannot lose accuracy OOD, so consistency and degradation can correlate only
because both follow accuracy. Its Fisher interval uses ``n − 4`` (one covariate).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.distill.intervals import LEVEL
from mechscope.distill.resample import cluster_pearson_interval

#: The consistency measures correlated with OOD degradation.
MEASURES = {"consistency_mean": "per-checkpoint mean", "consistency": "pooled"}
N_RESAMPLES = 2000


def pearson_intervals(
    x: np.ndarray, y: np.ndarray, *, level: float = LEVEL, seed: int = 0
) -> dict[str, float]:
    """Pearson r, its Fisher-z and bootstrap (BCa) intervals, and Spearman's rho and p."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    nan = float("nan")
    out = {"n": int(x.size), "r": nan, "fisher_low": nan, "fisher_high": nan}
    out.update(boot_low=nan, boot_high=nan, p_value=nan, spearman=nan, spearman_p=nan)
    if x.size < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return out
    res = stats.pearsonr(x, y)
    ci = res.confidence_interval(level)
    out.update(r=float(res.statistic), p_value=float(res.pvalue))
    out.update(fisher_low=float(ci.low), fisher_high=float(ci.high))
    low, high = bootstrap_interval(x, y, level=level, seed=seed)
    out.update(boot_low=low, boot_high=high)
    rho = stats.spearmanr(x, y)
    out.update(spearman=float(rho.statistic), spearman_p=float(rho.pvalue))
    return out


def bootstrap_interval(
    x: np.ndarray, y: np.ndarray, *, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """BCa bootstrap interval of Pearson r, resampling (x, y) points together; the
    percentile interval where BCa is undefined (few distinct points: its acceleration
    divides by zero)."""
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # r of a constant resample
            ci = stats.bootstrap(
                (x, y),
                lambda a, b: stats.pearsonr(a, b).statistic,
                paired=True,
                vectorized=False,
                n_resamples=N_RESAMPLES,
                confidence_level=level,
                method=method,
                rng=np.random.default_rng(seed),
            ).confidence_interval
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            break
    return float(ci.low), float(ci.high)


def partial_pearson(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, *, level: float = LEVEL
) -> tuple[float, float, float]:
    """Pearson r of ``x`` and ``y`` with the linear effect of ``z`` removed from both, and
    its Fisher-z interval with ``n − 4`` degrees of freedom."""
    x, y, z = (np.asarray(a, np.float64) for a in (x, y, z))
    design = np.column_stack([np.ones_like(z), z])  # [n, 2]

    def resid(v: np.ndarray) -> np.ndarray:
        return v - design @ np.linalg.lstsq(design, v, rcond=None)[0]

    rx, ry = resid(x), resid(y)
    if x.size < 5 or np.ptp(rx) < 1e-12 or np.ptp(ry) < 1e-12:
        return (float("nan"),) * 3
    r = float(np.clip(stats.pearsonr(rx, ry).statistic, -1 + 1e-12, 1 - 1e-12))
    half = stats.norm.ppf(0.5 + level / 2) / np.sqrt(x.size - 4)
    return r, float(np.tanh(np.arctanh(r) - half)), float(np.tanh(np.arctanh(r) + half))


def distilled(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials of distilled students with an OOD degradation."""
    base = trials["base_method"] if "base_method" in trials else trials["method"]
    return trials[(base != "untrained") & trials["ood_degradation"].notna()]


def robustness_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per student × task × consistency measure (module docstring)."""
    rows = []
    for (student, task), g in distilled(trials).groupby(["student", "task"], sort=True):
        for measure, label in MEASURES.items():
            ok = g[g[measure].notna()]
            x, y = ok[measure].to_numpy(), ok["ood_degradation"].to_numpy()
            row = {"student": student, "task": task, "measure": label}
            row.update(pearson_intervals(x, y))
            methods = ok["method"].astype(str)  # a weight variant is a method of its own
            low, high = cluster_pearson_interval(x, y, methods.to_numpy())
            row.update(cluster_low=low, cluster_high=high, n_methods=int(methods.nunique()))
            r, low, high = partial_pearson(x, y, ok["accuracy"].to_numpy())
            row.update(partial_r=r, partial_low=low, partial_high=high)
            row["methods"] = ", ".join(dict.fromkeys(ok["method"].astype(str)))
            rows.append(row)
    return pd.DataFrame(rows)


def format_robustness(table: pd.DataFrame, digits: int = 2) -> str:
    """Markdown: r with its Fisher-z and cluster-bootstrap intervals, Spearman's rho, and
    the partial r given accuracy."""
    head = [
        "student · task", "consistency", "students (methods)", "Pearson r",
        "95 % CI (Fisher z)", "95 % CI (cluster bootstrap)", "p", "Spearman ρ (p)",
        "partial r given accuracy [95 % CI]",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    f = f"{{:+.{digits}f}}"

    def ci(low: float, high: float) -> str:
        return "–" if not np.isfinite(low) else f"[{f.format(low)}, {f.format(high)}]"

    for r in table.itertuples():
        fin = np.isfinite(r.r)
        cells = [
            f"{r.student} · {r.task}",
            r.measure,
            f"{r.n} ({getattr(r, 'n_methods', '?')})",
            f.format(r.r) if fin else "–",
            ci(r.fisher_low, r.fisher_high),
            ci(getattr(r, "cluster_low", np.nan), getattr(r, "cluster_high", np.nan)),
            f"{r.p_value:.2g}" if fin else "–",
            f"{f.format(r.spearman)} ({r.spearman_p:.2g})" if fin else "–",
            f"{f.format(r.partial_r)} {ci(r.partial_low, r.partial_high)}"
            if np.isfinite(r.partial_r)
            else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
