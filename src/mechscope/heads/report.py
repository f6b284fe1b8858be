"""Report section of head attribution: built from :meth:`HeadsResult.from_run` and the run's
description tables (``heads_meta``, ``heads_notes``); never loads a model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.heads.figures import KIND_NAMES, attribution_figures, lead_path, pruning_figures
from mechscope.heads.postprocess import orient
from mechscope.heads.result import HeadsResult
from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import ci_words, pct, with_interval
from mechscope.runs import RunDir, has_arrays, has_table, read_table
from mechscope.runs.tensors import array
from mechscope.stats import mean_ci

INTRO = (
    "**Head attribution by integrated gradients over head gates.** Every head's output `z` "
    "is scaled by a gate α; IG integrates the objective's gradient along a path of gates from "
    "the baseline to 1 (all heads on). *Joint* IG moves all heads together; *per-layer* IG "
    "moves one layer while the others stay on. Completeness: the attributions of one path "
    "must add up to f(end) − f(start); the table shows how far the quadrature is from that. "
    "Importance is oriented so that positive means *helps the objective*."
)


def completeness_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per path family: median and worst relative error, worst absolute error, time."""
    seg = df[df["segment"] != "mean"].assign(gap=lambda d: (d["f_end"] - d["f_start"]).abs())
    out = seg.groupby("path", sort=False).agg(
        segments=("delta", "size"),
        n_steps=("n_steps", "first"),
        method=("method", "first"),
        median_rel_error=("rel_delta", "median"),
        max_rel_error=("rel_delta", "max"),
        max_abs_error=("abs_delta", "max"),
        median_gap=("gap", "median"),
    )
    per_sample = df.drop_duplicates(["sample_id", "path"]).groupby("path", sort=False)["seconds"]
    out["seconds_per_sample"] = per_sample.mean()
    return out.reset_index()


def completeness_warnings(summary: pd.DataFrame, limit: float = 0.05) -> list[str]:
    """A sentence for every path family whose median completeness error exceeds ``limit``."""
    out = []
    for _, r in summary.iterrows():
        if r["median_rel_error"] > limit:
            out.append(
                f"**Caution ({r['path']}):** the median completeness error is "
                f"{r['median_rel_error']:.0%} of |f(end) − f(start)| at {r['n_steps']} "
                f"{r['method']} nodes, so these attributions (and the diagnostics built on them) "
                "carry large quadrature error: the objective changes abruptly along this path. "
                "Use more steps (or refinement) before reading rankings from it."
            )
    return out


def diagnostics_table(df: pd.DataFrame) -> pd.DataFrame:
    """Metrics as rows, methods as columns (the note's comparison table)."""
    wide = df.pivot_table(index="metric", columns="method", values="value", sort=False)
    return wide.reset_index()


def pruning_table(auc: pd.DataFrame) -> pd.DataFrame:
    """Average level of each ranked pruning curve next to the mean and SD of random orders."""
    rnd = auc[auc["kind"] == "random"]
    rows = []
    for _, r in auc[auc["kind"] != "random"].iterrows():
        rows.append(
            {
                "order": r["order"],
                "auc_objective": r["auc_objective"],
                "random_auc_objective": rnd["auc_objective"].mean() if len(rnd) else np.nan,
                "random_sd": rnd["auc_objective"].std(ddof=1) if len(rnd) > 1 else np.nan,
                "auc_accuracy": r["auc_accuracy"],
                "random_auc_accuracy": rnd["auc_accuracy"].mean() if len(rnd) else np.nan,
            }
        )
    return pd.DataFrame(rows)


def top_head_sentence(result: HeadsResult, path: str, summary: pd.DataFrame) -> str:
    """The head ``path`` ranks most helpful, its mean IG with its interval over samples, and
    the path's median completeness error."""
    x = orient(array(result.attributions[path]), result.higher_is_better)  # [n, L, H]
    layer, head = np.unravel_index(np.argmax(x.mean(axis=0)), x.shape[1:])
    mean, low, high, n = mean_ci(x[:, layer, head])
    err = summary.set_index("path")["median_rel_error"].get(path, np.nan)
    return (
        f"{path} IG ranks head **L{layer}h{head}** most helpful: mean attribution "
        f"{with_interval(mean, low, high, 3, missing='')} ({ci_words(n, 'samples')}); its median "
        f"completeness error is {pct(err)}."
    )


def pruning_sentence(result: HeadsResult, ranking: str) -> str | None:
    """The objective with the most heads removed, least important first by ``ranking``,
    against random orders (means with their bands over samples)."""
    bands = result.pruning_bands
    if bands is None:
        return None
    part = bands[(bands["metric"] == "objective") & (bands["fraction"] == bands["fraction"].max())]
    rows = part.set_index("kind")
    least = f"{ranking}/least_first"
    if least not in rows.index or "random" not in rows.index:
        return None
    a, r = rows.loc[least], rows.loc["random"]
    return (
        f"With {pct(float(part['fraction'].iloc[0]))} of heads removed "
        f"{KIND_NAMES['least_first']} by {ranking}, the objective is "
        f"{with_interval(a['mean'], a['low'], a['high'])} against "
        f"{with_interval(r['mean'], r['low'], r['high'])} for random orders."
    )


@register_section("heads", "Head attribution: integrated gradients over head gates")
def attribution_section(run: RunDir) -> list | None:
    if not has_arrays(run, "heads_attributions"):
        return None
    result = HeadsResult.from_run(run)
    summary = completeness_summary(result.completeness)
    lead = lead_path(result)
    finding = [top_head_sentence(result, lead, summary)] if lead else []
    ranking = _prune_lead(result, lead)
    if ranking and (text := pruning_sentence(result, ranking)):
        finding.append(text)
    figures = [FigureBlock(fig, name=name) for name, fig in attribution_figures(result)]
    blocks: list = [FindingBlock(" ".join(finding) or "Head attributions computed.")]
    blocks.append(figures.pop(0))  # the lead path's importance map
    blocks += [TextBlock(w) for w in completeness_warnings(summary)]
    pruning = [FigureBlock(fig, name=name) for name, fig in pruning_figures(result)]
    more = pruning + figures
    blocks.append(
        DetailsBlock(f"More figures: pruning, other paths, agreement ({len(more)})", more)
    )
    method: list = [TextBlock(INTRO)]
    if has_table(run, "heads_notes"):
        notes = read_table(run, "heads_notes")["note"].tolist()
        method.append(TextBlock("\n".join(f"- {n}" for n in notes)))
    blocks.append(DetailsBlock("How this was computed", method))
    if has_table(run, "heads_meta"):
        t = read_table(run, "heads_meta")
        meta = dict(zip(t["key"], t["value"], strict=True))
        blocks.append(KeyValueBlock(meta, caption="What was run"))
    blocks.append(
        TableBlock(
            summary,
            caption="Completeness per path family: |Σ attributions − (f(end) − f(start))| "
            "relative to |f(end) − f(start)| (per-layer: each layer against its own "
            "endpoints, where small gaps make relative errors large).",
            title="Completeness per path",
        )
    )
    blocks.append(
        TableBlock(
            diagnostics_table(result.diagnostics),
            caption="Data-specificity diagnostics (the note's analysis): one sample vs all, "
            "pairwise correlation of per-sample vectors, per-head variance across "
            "samples, agreement between methods.",
            title="Data-specificity diagnostics",
            max_rows=80,
        )
    )
    if result.pruning_auc is not None:
        blocks.append(
            TableBlock(
                pruning_table(result.pruning_auc),
                caption="Average level of each pruning curve (area over the removed fraction "
                "divided by its width), against the mean and SD over random orders.",
                title="Pruning: average level of each curve",
            )
        )
    if result.shapley is not None:
        blocks.append(
            TableBlock(
                result.shapley,
                caption="Sampled Shapley values of the top heads (antithetic permutation "
                "sampling; se = standard error) next to their IG attributions.",
                title="Shapley values of the top heads",
            )
        )
    return blocks


def _prune_lead(result: HeadsResult, lead: str | None) -> str | None:
    """The ranking the pruning sentence reports: the lead path if it ordered pruning, else
    the first ranking that did."""
    if result.pruning_bands is None:
        return None
    kinds = [str(k) for k in result.pruning_bands["kind"].unique() if "/" in str(k)]
    rankings = list(dict.fromkeys(k.split("/")[0] for k in kinds))
    return lead if lead in rankings else (rankings[0] if rankings else None)
