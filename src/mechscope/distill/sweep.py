"""The loss-weight sweep: does some weight let RCID learn the task and keep more mechanism?

A study whose ``methods`` hold variants of one method with their own ``lambda_kl`` and
``lambda_method`` (``{method: rcid, lambda_method: 0.1}``) is a sweep. Per variant this
reads, against output-only KD with the same seeds:

- accuracy and the per-checkpoint consistency, mean over seeds and 95 % interval;
- their seed-paired differences from KD (:func:`~mechscope.distill.intervals.paired_difference`);
- the two loss terms' gradients on the student (:mod:`mechscope.distill.gradients`): mean
  cosine over the logged steps and the median ratio of the method term's norm to the KL
  term's, means over seeds;
- two verdicts: ``learns`` (mean accuracy within ``LEARN_MARGIN`` of KD's) and
  ``more_mechanism`` (the paired consistency difference's interval above 0).

A variant with one finished seed has no interval over seeds; its accuracy then gets the
Wilson interval over the test pairs (:func:`~mechscope.stats.proportions.pass_rate`,
``accuracy_ci_over: pairs``): how far the rate could move on other pairs of the task, the
student fixed. It says nothing of the seed-to-seed spread, which is usually wider.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.distill.intervals import RANGES, mean_ci, paired_difference
from mechscope.report import Figure, Series, curves
from mechscope.stats.proportions import pass_rate

#: "Learns the task": mean test accuracy at most this far below KD's (issue: within 0.05).
LEARN_MARGIN = 0.05
REFERENCE = "standard_kd"
#: Methods whose weight a sweep varies (those with a method term).
SWEPT = ("rcid", "informed_fitnets", "fitnets")
#: Per-trial gradient summaries (:func:`mechscope.distill.gradients.train_summary`) that
#: the table averages over seeds.
GRADIENT_METRICS = ("grad_cos_mean", "grad_ratio_median", "adam_cos_mean", "adam_ratio_median")


def with_loss_columns(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials of studies written before variants existed have no ``base_method``/λ columns:
    their method is their base and their weights unknown (NaN)."""
    out = trials.copy()
    if "base_method" not in out:
        out["base_method"] = out["method"]
    for col in ("lambda_kl", "lambda_method"):
        if col not in out:
            out[col] = np.nan
    return out


def _ci_cells(x: pd.Series) -> tuple[float, float, float]:
    """Mean over seeds and its interval, cut to the metric's range (``x.name``)."""
    arr = x.to_numpy(np.float64)
    finite = arr[np.isfinite(arr)]
    low, high = mean_ci(arr, bounds=RANGES.get(str(x.name)))
    return (float(finite.mean()) if finite.size else float("nan")), low, high


def _accuracy_cells(v: pd.DataFrame) -> tuple[float, float, float, str]:
    """Accuracy's mean and interval over seeds; with one seed (and ``n_test`` known) the
    Wilson interval over the test pairs instead; the last cell says which."""
    mean, low, high = _ci_cells(v["accuracy"])
    if len(v) == 1 and "n_test" in v and np.isfinite(mean):
        n = int(v["n_test"].iloc[0])
        rate = pass_rate(round(mean * n), n)
        return mean, rate.low, rate.high, "pairs"
    return mean, low, high, "seeds"


def sweep_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per student × task × variant of a swept method, plus KD's row; empty when the
    study has no KD or no variant with its own weights."""
    trials = with_loss_columns(trials)
    rows = []
    for (student, task), g in trials.groupby(["student", "task"], sort=True):
        ref = g[g["method"] == REFERENCE].set_index("seed")
        swept = g[g["base_method"].isin(SWEPT)]
        if ref.empty or swept["method"].nunique() < 2:
            continue
        for method, v in pd.concat([g[g["method"] == REFERENCE], swept]).groupby(
            "method", sort=False
        ):
            lkl, lm = float(v["lambda_kl"].iloc[0]), float(v["lambda_method"].iloc[0])
            row = {"student": student, "task": task, "method": method}
            row.update(base_method=v["base_method"].iloc[0], lambda_kl=lkl, lambda_method=lm)
            row["ratio"] = lm / lkl if method != REFERENCE and lkl > 0 else float("nan")
            mean, low, high, over = _accuracy_cells(v)
            row.update(accuracy=mean, accuracy_ci_low=low, accuracy_ci_high=high)
            row["accuracy_ci_over"] = over
            for metric in ("consistency_mean", *GRADIENT_METRICS):
                if metric in v:
                    mean, low, high = _ci_cells(v[metric])
                    row.update({metric: mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high})
            if "train_kl_end" in v:
                row["train_kl_end"] = float(v["train_kl_end"].mean())
            v = v.set_index("seed")
            for metric, short in (("accuracy", "acc"), ("consistency_mean", "cons")):
                d = paired_difference(v[metric], ref[metric])
                row[f"d_{short}"] = d["difference"]
                row[f"d_{short}_ci_low"], row[f"d_{short}_ci_high"] = d["ci_low"], d["ci_high"]
            row["n_seeds"] = int(v.index.nunique())
            row["learns"] = bool(row["d_acc"] >= -LEARN_MARGIN)
            row["more_mechanism"] = bool(row["d_cons_ci_low"] > 0)
            rows.append(row)
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    df["_ref"] = df["method"] != REFERENCE
    df = df.sort_values(["student", "task", "_ref", "base_method", "ratio", "lambda_kl"])
    return df.drop(columns="_ref").reset_index(drop=True)


def fmt_interval(mean: float, low: float, high: float, signed: bool = False) -> str:
    """``mean [low, high]`` to three decimals (``–`` without a mean, the mean alone
    without an interval)."""
    if not np.isfinite(mean):
        return "–"
    f = "{:+.3f}" if signed else "{:.3f}"
    if not np.isfinite(low):
        return f.format(mean)
    return f"{f.format(mean)} [{f.format(low)}, {f.format(high)}]"


def format_sweep(table: pd.DataFrame) -> str:
    """Markdown: one row per variant, KD first; an accuracy interval over test pairs (one
    seed) is marked ``ᵖ`` and explained under the table."""
    head = [
        "student · task", "method", "λ_KL", "λ_method", "accuracy", "consistency (per-ckpt)",
        "Δ accuracy vs KD", "Δ consistency vs KD", "grad cos", "‖g_method‖/‖g_KL‖",
        "Adam cos", "Adam ratio", "learns", "more mechanism", "seeds",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples():
        ref = r.method == REFERENCE
        cells = [
            f"{r.student} · {r.task}",
            r.method,
            f"{r.lambda_kl:g}",
            "–" if ref else f"{r.lambda_method:g}",
            fmt_interval(r.accuracy, r.accuracy_ci_low, r.accuracy_ci_high) + _pairs_mark(r),
            fmt_interval(r.consistency_mean, r.consistency_mean_ci_low, r.consistency_mean_ci_high),
            "–" if ref else fmt_interval(r.d_acc, r.d_acc_ci_low, r.d_acc_ci_high, signed=True),
            "–" if ref else fmt_interval(r.d_cons, r.d_cons_ci_low, r.d_cons_ci_high, signed=True),
            *_gradient_cells(r, ref),
            "–" if ref else ("yes" if r.learns else "no"),
            "–" if ref else ("yes" if r.more_mechanism else "no"),
            str(r.n_seeds),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if (table.get("accuracy_ci_over", pd.Series(dtype=str)) == "pairs").any():
        lines.append("")
        lines.append(
            "ᵖ one seed: Wilson 95 % interval over the test pairs, not over seeds; "
            "consistency and the differences from KD have no interval with one seed."
        )
    return "\n".join(lines)


def _gradient_cells(r: object, ref: bool) -> list[str]:
    """Mean cosine and median norm ratio of the two terms' gradients, raw and after AdamW's
    scaling (KD has no method term: no ratio)."""
    cells = []
    for cos, ratio in (
        ("grad_cos_mean", "grad_ratio_median"),
        ("adam_cos_mean", "adam_ratio_median"),
    ):
        cells.append(fmt_interval(getattr(r, cos, np.nan), np.nan, np.nan, signed=True))
        cells.append("–" if ref else fmt_interval(getattr(r, ratio, np.nan), np.nan, np.nan))
    return cells


def _pairs_mark(r: object) -> str:
    return "ᵖ" if getattr(r, "accuracy_ci_over", "seeds") == "pairs" else ""


def sweep_figure(table: pd.DataFrame) -> Figure | None:
    """Accuracy and per-checkpoint consistency against the weight ratio λ_method / λ_KL (one
    category per ratio, in order), for the variants of the method with the most of them in
    the first student × task (FitNets at its one weight beside an RCID sweep), with KD's
    values as flat references; bands are 95 % intervals over seeds."""
    if table.empty:
        return None
    first = table[["student", "task"]].iloc[0]
    t = table[(table["student"] == first["student"]) & (table["task"] == first["task"])]
    ref = t[t["method"] == REFERENCE].iloc[0]
    var = t[t["method"] != REFERENCE]
    base = var["base_method"].value_counts(sort=True).idxmax()  # the method swept most
    var = var[var["base_method"] == base]
    ratios = sorted(set(var["ratio"].round(6)))
    series = []
    for metric, name in (("accuracy", "accuracy"), ("consistency_mean", "consistency")):
        for label, rows in (
            (f"{base} {name}, λ_KL = 1", var[var["lambda_kl"] == 1]),
            (f"{base} {name}, λ_KL varied", var[var["lambda_kl"] != 1]),
        ):
            if rows.empty:
                continue
            by = rows.set_index(rows["ratio"].round(6))
            pick = [by.loc[x] if x in by.index else None for x in ratios]

            def col(c: str, pick: list = pick) -> np.ndarray:
                return np.array([np.nan if p is None else p[c] for p in pick], dtype=float)

            lo, hi = col(f"{metric}_ci_low"), col(f"{metric}_ci_high")
            mean = col(metric)
            series.append(Series(label, mean, np.where(np.isnan(lo), mean, lo),
                                 np.where(np.isnan(hi), mean, hi), group=name))  # fmt: skip
        flat = np.full(len(ratios), ref[metric])
        low = np.full(len(ratios), ref[f"{metric}_ci_low"])
        high = np.full(len(ratios), ref[f"{metric}_ci_high"])
        series.append(Series(f"KD {name}", flat, np.where(np.isnan(low), flat, low),
                             np.where(np.isnan(high), flat, high), group=name))  # fmt: skip
    return curves(
        [f"{x:g}" for x in ratios],
        series,
        f"{first['student']} · {first['task']}: {base} by loss weight",
        "λ_method / λ_KL",
        "test accuracy; consistency (mean over checkpoints)",
        hline=0.5,
        caption=f"How to read this: each x is a weight ratio of {base}'s method term to the "
        "KL term; lines are means over seeds, bands their 95 % Student-t interval (with one "
        "seed: accuracy's Wilson interval over test pairs, no band for consistency). The "
        "flat lines are output-only KD. A weight that learns the task keeps accuracy near KD's "
        "line; one that keeps more mechanism has consistency above KD's. The dashed line is "
        "chance accuracy (0.5).",
    )
