"""Figures of the HumanEval study: functions of its result, never of a model.

Every figure takes a :class:`~mechscope.studies.humaneval.result.StudyResult` (reopened
from a run directory by ``StudyResult.from_run``) and reads its tables. The lens figures
themselves (heatmaps, per-layer curves, token heatmaps, segment masses) are the paired
analysis's own (:mod:`mechscope.lens.figures`, which take frames); this module selects the
rows of one variant, mode and quadrant, says which in the title, and adds what the paired
analysis has no figure for: pass rates, quadrant counts, mass per quadrant or per variant,
curves per variant and the tool-response mass of every head.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from mechscope.lens.figures import (
    aligned_heatmap,
    attention_figure,
    label,
    metric_curves_figure,
    sample_heatmap,
)
from mechscope.report import Figure, Series, bars, curves, heatmap
from mechscope.studies.humaneval.conditions import TOOL
from mechscope.studies.humaneval.outcomes import QUADRANTS
from mechscope.studies.humaneval.result import StudyResult

MODE_LABEL = {"as_run": "as run", "position_matched": "position-matched"}
AGENTIC = ("agentic", "assisted")  # conditions A and B of the study
ARM_LABEL = {
    "assisted": "assisted",
    "tests": "agentic: tests",
    "spec": "agentic: spec",
    "other_tests": "agentic: other tests",
    "empty": "agentic: empty",
    "canonical": "canonical solution",
}
QUADRANT_TEXT = (
    "G11: both arms pass; G10: only the agentic arm (task + tool response) passes; G01: "
    "only the assisted arm (task alone) passes; G00: neither."
)


def real_rows(result: StudyResult, key: str, mode: str) -> pd.DataFrame:
    """Rows of table ``key`` for the real tool response (the task's tests) in one mode."""
    df = result.table(key)
    return df[(df["variant"] == "tests") & (df["mode"] == mode)]


def control_mass(result: StudyResult) -> pd.DataFrame:
    """Tool-response mass per layer and variant over all tasks (agentic, as run)."""
    att = result.table("attention")
    return att[
        (att["mode"] == "as_run")
        & (att["condition"] == "agentic")
        & (att["segment"] == TOOL)
        & (att["group"] == "all")
    ]


def _retitle(fig: Figure, suffix: str) -> Figure:
    return dataclasses.replace(fig, title=f"{fig.title} — {suffix}")


def _band(g: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray | None]:
    low, high = g["low"].to_numpy(), g["high"].to_numpy()
    return (None, None) if np.all(np.isnan(low)) else (low, high)


def pass_rate_figure(result: StudyResult) -> Figure:
    """Pass rate of every arm with its Wilson interval."""
    rates = result.table("pass_rates")
    return bars(
        [
            f"{ARM_LABEL.get(a, a)} ({p}/{n})"
            for a, p, n in zip(rates.arm, rates.passed, rates.n, strict=True)
        ],
        [
            Series(
                "pass rate",
                rates["rate"].to_numpy(),
                rates["low"].to_numpy(),
                rates["high"].to_numpy(),
            )
        ],
        "HumanEval pass rate per arm",
        "pass rate",
        "",
        horizontal=True,
        caption=(
            "Share of tasks whose completion passes all of the task's unit tests in the "
            "sandbox; whiskers are 95% Wilson score intervals. 'canonical solution' runs "
            "HumanEval's reference solution through the same sandbox: it should be 1."
        ),
    )


def quadrant_figure(result: StudyResult) -> Figure:
    """Task counts per quadrant, one bar group per variant."""
    quadrants = result.table("quadrants")
    return bars(
        [str(v) for v in quadrants["variant"]],
        [Series(q, quadrants[q].to_numpy(dtype=float)) for q in QUADRANTS],
        "Tasks per quadrant (agentic variant vs assisted)",
        "tool response of the agentic arm",
        "tasks",
        caption=QUADRANT_TEXT,
    )


def group_heatmap(result: StudyResult, metric: str, group: str, mode: str) -> Figure:
    """Layer × progress heatmap of one quadrant of the real tool response (the note's
    figure 1, aggregated); the title counts the quadrant's tasks."""
    aligned = real_rows(result, "aligned", mode)
    part = aligned[aligned["group"] == group]
    n = quadrant_counts(result).get(group, 0)
    return _retitle(
        aligned_heatmap(part, metric, names=AGENTIC), f"{group} (n={n}), {MODE_LABEL[mode]}"
    )


def quadrant_counts(result: StudyResult) -> dict[str, int]:
    """Tasks per quadrant of the real tool response (quadrants without tasks left out)."""
    groups = result.table("groups")
    counts = groups[groups["variant"] == "tests"]["quadrant"].value_counts()
    return {str(g): int(n) for g, n in counts.items()}


def group_curves(result: StudyResult, metric: str, mode: str, kind: str = "curve") -> Figure:
    """Per-layer curves per quadrant of the real tool response (the note's figure 2), or the
    G10 − G01 difference."""
    part = real_rows(result, "curves", mode)
    return _retitle(metric_curves_figure(part, metric, kind, AGENTIC), MODE_LABEL[mode])


def mass_by_group(result: StudyResult, mode: str) -> Figure:
    """Attention mass on the real tool response per layer, one line per quadrant (figure 3)."""
    attention = real_rows(result, "attention", mode)
    part = attention[(attention["condition"] == "agentic") & (attention["segment"] == TOOL)]
    series = []
    for group, g in part.groupby("group", sort=False):
        g = g.sort_values("layer")
        low, high = _band(g)
        series.append(Series(f"{group} (n={int(g['n'].iloc[0])})", g["mean"].to_numpy(), low, high))
    return curves(
        sorted(part["layer"].unique()),
        series,
        f"Attention mass on the tool response per quadrant — {MODE_LABEL[mode]}",
        "layer",
        "attention probability",
        caption=(
            "For the query predicting each canonical-solution token (agentic condition), the "
            "attention probability summed over the tool response's keys, averaged over heads "
            "and semantic tokens, then tasks; bands are 95% bootstrap CIs (stratified by "
            "quadrant for 'all'). " + QUADRANT_TEXT
        ),
    )


def _variant_series(frame: pd.DataFrame) -> list[Series]:
    """One per-layer series (mean and CI band) per tool-response variant, in table order."""
    series = []
    for variant, g in frame.groupby("variant", sort=False):
        g = g.sort_values("layer")
        low, high = _band(g)
        series.append(Series(str(variant), g["mean"].to_numpy(), low, high))
    return series


def variant_curves(result: StudyResult, metric: str, mode: str) -> Figure:
    """One per-layer curve per tool-response variant (all tasks): the content controls."""
    table = result.table("curves")
    curves_all = table[
        (table["mode"] == mode)
        & (table["metric"] == metric)
        & (table["group"] == "all")
        & (table["kind"] == "curve")
    ]
    return curves(
        sorted(curves_all["layer"].unique()),
        _variant_series(curves_all),
        f"{label(metric, AGENTIC)} per layer by tool response — {MODE_LABEL[mode]}",
        "layer",
        label(metric, AGENTIC),
        hline=0.0 if metric == "dnll" else None,
        caption=(
            "Agentic (task + read_file + the given tool response) against assisted (task "
            "alone), teacher-forcing the canonical solution; mean over semantic tokens, then "
            "over all tasks; bands are 95% bootstrap CIs stratified by quadrant. 'tests' is "
            "the real tool response; 'spec' repeats the task, 'other_tests' are other tasks' "
            "tests cut to the same token count, 'empty' is an empty result."
        ),
    )


def variant_mass(result: StudyResult) -> Figure:
    """Tool-response attention mass per layer for every variant that has one."""
    attention_all = control_mass(result)
    return curves(
        sorted(attention_all["layer"].unique()),
        _variant_series(attention_all),
        "Attention mass on the tool response by its content",
        "layer",
        "attention probability",
        caption=(
            "Agentic condition, as run (position matching moves only the assisted prompt, so "
            "these masses are the same in both modes); heads and semantic tokens averaged, "
            "bands are 95% bootstrap CIs. An empty tool response has no tokens: its mass is 0."
        ),
    )


def head_mass_figure(result: StudyResult, variant: str = "tests") -> Figure:
    """Layer × head heatmap of the mass on the tool response (mean over tasks)."""
    heads = result.table("heads")
    part = heads[heads["variant"] == variant]
    z = part.pivot(index="layer", columns="head", values="mass").sort_index()  # [L, H]
    return heatmap(
        z.to_numpy()[::-1],
        [str(h) for h in z.columns],
        [str(v) for v in z.index[::-1]],
        f"Which heads read the tool response ({variant}, n={int(part['n'].iloc[0])})",
        colorbar_title="mass",
        x_title="head",
        y_title="layer",
        caption=(
            "Each cell: one head's attention probability on the tool response, averaged over "
            "the semantic tokens of the canonical solution and over tasks (agentic, as run)."
        ),
    )


def example_figure(result: StudyResult) -> Figure:
    """ΔNLL per layer and token of the example task (the paired analysis's token heatmap)."""
    example = result.table("example")
    sample = str(example["sample"].iloc[0])
    return sample_heatmap(example, sample, "dnll", "agentic − assisted")


def segment_figure(result: StudyResult) -> Figure:
    """Attention mass per prompt segment of the agentic prompt (real tool response, as run)."""
    att = result.table("attention")
    seg = att[(att["variant"] == "tests") & (att["mode"] == "as_run")]
    return attention_figure(seg, "agentic")
