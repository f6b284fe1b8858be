"""The simulation's tables (``anchors simulate``): per design with Monte-Carlo intervals, per
trace, and as GitHub Markdown.

**Monte-Carlo intervals.** Seed ``s`` of the simulation is one whole experiment over the
traces (every trace simulated once); its result is the total rollouts over all traces (and
their share of the fixed design's) and each score's mean over the traces. The table gives
the mean of these over the seeds ± ``1.96 · sd / √seeds``: the simulation's own uncertainty
about the design's expected result. Differences from the fixed design and from the uniform
baseline at equal cost (``d_top5``, ``d_uniform_top5``) are taken seed by seed (both read
the same rollouts), which is why they are tighter than the scores.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.simulate import uniform_name

Z95 = 1.959963984540054  # two-sided 95 % normal quantile
SCORES = ("spearman", "top5", "coverage")


def per_seed(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (design, seed): total rollouts and share over the traces, mean scores."""
    g = frame.groupby(["design", "seed"], sort=False)
    out = g[list(SCORES)].mean()
    out["rollouts"] = g["rollouts"].sum()
    fixed = frame.assign(fixed=frame["rollouts"] / frame["share"]).groupby(
        ["design", "seed"], sort=False
    )["fixed"]
    out["share"] = out["rollouts"] / fixed.sum()
    return out


def _mean_ci(values: pd.Series) -> tuple[float, float]:
    v = values.to_numpy(float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return float(np.mean(v)) if v.size else np.nan, np.nan
    return float(v.mean()), Z95 * float(v.std(ddof=1)) / np.sqrt(v.size)


def design_summary(frame: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Per design (adaptive designs, not their baselines, as rows): mean rollouts per run of
    all traces, share and saving against the fixed design, each score with its Monte-Carlo
    half-width (``…_ci``), top-5 against ``reference`` seed by seed (``d_top5``), the
    uniform baseline at equal cost's scores (``uniform_…``) and the design's top-5 against
    it, seed by seed (``d_uniform_top5``)."""
    seeds = per_seed(frame)
    names = [d for d in frame["design"].unique() if not str(d).startswith("uniform = ")]
    rows = []
    for name in names:
        part = seeds.loc[name]
        row = {"design": name}
        row["rollouts"], row["rollouts_ci"] = _mean_ci(part["rollouts"])
        row["share"], row["share_ci"] = _mean_ci(part["share"])
        row["saving"], row["saving_ci"] = 1 - row["share"], row["share_ci"]
        for col in SCORES:
            row[col], row[f"{col}_ci"] = _mean_ci(part[col])
        if reference is not None and reference in seeds.index.get_level_values(0):
            diff = part["top5"] - seeds.loc[reference]["top5"].reindex(part.index)
            row["d_top5"], row["d_top5_ci"] = _mean_ci(diff)
        base = uniform_name(name)
        known = base in seeds.index.get_level_values(0)
        for col in SCORES:
            mean, ci = _mean_ci(seeds.loc[base][col]) if known else (np.nan, np.nan)
            row[f"uniform_{col}"], row[f"uniform_{col}_ci"] = mean, ci
        diff = part["top5"] - seeds.loc[base]["top5"].reindex(part.index) if known else None
        row["d_uniform_top5"], row["d_uniform_top5_ci"] = (
            _mean_ci(diff) if diff is not None else (np.nan, np.nan)
        )
        rows.append(row)
    return pd.DataFrame(rows).set_index("design")


def per_trace_table(frame: pd.DataFrame, adaptive: str, fixed: str) -> pd.DataFrame:
    """Per trace: the fixed design's rollouts and the adaptive design's mean rollouts,
    saving, and both designs' and the equal-cost uniform baseline's mean scores."""
    mean = frame.groupby(["design", "trace"], sort=False).mean(numeric_only=True)
    a, f = mean.loc[adaptive], mean.loc[fixed]
    u = mean.loc[uniform_name(adaptive)] if uniform_name(adaptive) in mean.index else None
    table = pd.DataFrame(
        {
            "positions": f["positions"].astype(int),
            "fixed_rollouts": f["rollouts"].round().astype(int),
            "adaptive_rollouts": a["rollouts"].round().astype(int),
            "saving": 1 - a["rollouts"] / f["rollouts"],
            "spearman_fixed": f["spearman"],
            "spearman_adaptive": a["spearman"],
            "top5_fixed": f["top5"],
            "top5_adaptive": a["top5"],
            "top5_uniform": np.nan if u is None else u["top5"],
        }
    )
    total = table.sum(numeric_only=True)
    table.loc["all"] = table.mean(numeric_only=True)
    for col in ("positions", "fixed_rollouts", "adaptive_rollouts"):
        table.loc["all", col] = total[col]
    table.loc["all", "saving"] = 1 - total["adaptive_rollouts"] / total["fixed_rollouts"]
    return table


def with_intervals(summary: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """The summary for reading: ``mean ± half-width`` cells, one column per quantity."""
    out = pd.DataFrame(index=summary.index)
    for col in summary.columns:
        if col.endswith("_ci"):
            continue
        ci = summary.get(f"{col}_ci")
        fmt = "{:,.0f}" if col == "rollouts" else f"{{:.{digits}f}}"
        cells = []
        for name, v in summary[col].items():
            if pd.isna(v):
                cells.append("")
            elif ci is None or pd.isna(ci[name]):
                cells.append(fmt.format(v))
            else:
                cells.append(f"{fmt.format(v)} ± {fmt.format(ci[name])}")
        out[col] = cells
    return out


def short_name(trace_id: str) -> str:
    """``deepseek-r1-distill-qwen-14b/correct_base_solution/problem_1591`` ->
    ``qwen-14b/correct/1591``."""
    parts = trace_id.split("/")
    if len(parts) != 3:
        return trace_id
    model, solution, problem = parts
    return "/".join(
        [model.removeprefix("deepseek-r1-distill-"), solution.removesuffix("_base_solution"),
         problem.removeprefix("problem_")]
    )  # fmt: skip


def markdown(table: pd.DataFrame, digits: int = 2) -> str:
    """``table`` as a GitHub Markdown table: integers with thousands separators, shares and
    correlations to ``digits`` decimals, strings as they are."""

    def cell(v) -> str:
        if isinstance(v, str):
            return v
        if pd.isna(v):
            return ""
        if float(v).is_integer() and abs(v) >= 10:
            return f"{int(v):,}"
        return f"{v:.{digits}f}"

    head = [table.index.name or ""] + [str(c) for c in table.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in table.iterrows():
        lines.append("| " + " | ".join([str(name)] + [cell(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"
