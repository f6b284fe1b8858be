"""The study's tables, computed from its shards (no model): outcomes, rates, quadrants, lens.

Lens curves, attention curves, aligned heatmaps and mass–ΔNLL correlations come from
:mod:`mechscope.lens.aggregate` unchanged, once per (variant, mode), with each task's
quadrant *for that variant* as its group; this module only adds the ``variant`` and
``mode`` columns and the per-quadrant splits the paired analysis does not make itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from mechscope.lens.aggregate import (
    AggregateOptions,
    aligned_heatmaps,
    attention_correlations,
    attention_curves,
    ci_rows,
    correlation_summary,
    metric_curves,
    per_sample_layer_means,
)
from mechscope.lens.result import SampleDiff
from mechscope.runs.tensors import array
from mechscope.stats.proportions import mcnemar_exact, pass_rate
from mechscope.studies.humaneval.arms import ASSISTED
from mechscope.studies.humaneval.conditions import TOOL
from mechscope.studies.humaneval.execute import CANONICAL
from mechscope.studies.humaneval.outcomes import QUADRANTS, quadrant
from mechscope.studies.humaneval.payload import pair_diff
from mechscope.studies.humaneval.task_run import MODES


def outcome_frame(payloads: Mapping[str, dict], tests: Mapping[str, dict]) -> pd.DataFrame:
    """One row per task and arm (plus the canonical solution): pass/fail and why."""
    rows = []
    for tid, pay in payloads.items():
        for arm, res in tests[tid]["results"].items():
            rows.append(
                {
                    "task": tid,
                    "arm": arm,
                    "condition": arm if arm in (ASSISTED, CANONICAL) else "agentic",
                    "passed": bool(res["passed"]),
                    "reason": res["reason"],
                    "exception": res["exception"],
                    "message": res["message"],
                    "seconds": res["seconds"],
                    "new_tokens": pay["new_tokens"].get(arm),
                    "stop": pay["stops"].get(arm),
                    "completion": pay["completions"].get(arm, ""),
                    "stderr": res["stderr"],
                }
            )
    return pd.DataFrame(rows)


def pass_rate_frame(outcomes: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """Pass rate per arm with a Wilson interval."""
    rows = []
    for arm, part in outcomes.groupby("arm", sort=False):
        r = pass_rate(int(part["passed"].sum()), len(part), confidence)
        rows.append(
            {"arm": arm, "passed": r.passed, "n": r.n, "rate": r.rate, "low": r.low, "high": r.high}
        )
    return pd.DataFrame(rows)


def quadrant_frames(
    outcomes: pd.DataFrame, variants: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(task × variant → quadrant, quadrant counts per variant with McNemar's p)."""
    passed = outcomes.pivot(index="task", columns="arm", values="passed")
    groups, counts = [], []
    for v in variants:
        q = [quadrant(a, g) for a, g in zip(passed[ASSISTED], passed[v], strict=True)]
        groups.append(pd.DataFrame({"task": passed.index, "variant": v, "quadrant": q}))
        n = {g: q.count(g) for g in QUADRANTS}
        counts.append(
            {
                "variant": v,
                **n,
                "n": len(q),
                "agentic_rate": float(np.mean(passed[v])),
                "assisted_rate": float(np.mean(passed[ASSISTED])),
                "mcnemar_p": mcnemar_exact(n["G10"], n["G01"]),
            }
        )
    return pd.concat(groups, ignore_index=True), pd.DataFrame(counts)


def _diffs(
    payloads: Mapping[str, dict], groups: pd.DataFrame, variant: str, mode: str
) -> list[SampleDiff]:
    quad = groups[groups["variant"] == variant].set_index("task")["quadrant"]
    out = []
    for tid, pay in payloads.items():
        diff = pair_diff(pay, variant, mode)
        diff.group = str(quad[tid])
        out.append(diff)
    return out


def _label(df: pd.DataFrame, **labels: object) -> pd.DataFrame:
    return df.assign(**labels) if not df.empty else df


def lens_frames(
    payloads: Mapping[str, dict],
    groups: pd.DataFrame,
    variants: Sequence[str],
    opts: AggregateOptions,
) -> dict[str, pd.DataFrame]:
    """Lens tables of every (variant, mode), plus the control summary and an example."""
    frames: dict[str, list[pd.DataFrame]] = {
        k: [] for k in ("curves", "attention", "aligned", "correlation", "correlation_summary")
    }
    controls = []
    example = pd.DataFrame()
    for v in variants:
        for mode in MODES:
            samples = _diffs(payloads, groups, v, mode)
            lab = {"variant": v, "mode": mode}
            frames["curves"].append(_label(metric_curves(samples, opts), **lab))
            frames["attention"].append(_label(attention_curves(samples, opts), **lab))
            for g in ("all", *QUADRANTS):
                part = [s for s in samples if g in ("all", s.group)]
                if part:
                    heat = aligned_heatmaps(part, opts, metrics=("dnll", "js"))
                    frames["aligned"].append(_label(heat, **lab, group=g))
            corr = attention_correlations(samples)
            frames["correlation"].append(_label(corr, **lab))
            for g in ("all", *QUADRANTS):
                part = corr if g == "all" or corr.empty else corr[corr["group"] == g]
                frames["correlation_summary"].append(
                    _label(correlation_summary(part, opts), **lab, group=g)
                )
            controls.append(control_rows(samples, opts, **lab))
            if v == "tests" and mode == "as_run":
                pick = next((s for s in samples if s.group == "G10"), samples[0])
                example = pick.to_frame()
    out = {k: pd.concat(f, ignore_index=True) if f else pd.DataFrame() for k, f in frames.items()}
    out["controls"] = pd.concat(controls, ignore_index=True)
    out["example"] = example
    return out


def tool_mass(s: SampleDiff) -> np.ndarray:
    """``[layers]``: agentic attention mass on the tool response (heads and semantic tokens
    averaged); 0 where the tool response has no tokens."""
    segs = s.segments["agentic"]
    if TOOL not in segs:
        return np.zeros(s.n_layers)
    mass = array(s.attention["agentic"])[..., segs.index(TOOL)]  # [L, H, T]
    return mass.mean(axis=1)[:, array(s.semantic)].mean(axis=1)


def control_rows(samples: Sequence[SampleDiff], opts: AggregateOptions, **labels) -> pd.DataFrame:
    """Per-task scalars with bootstrap CIs: tool-response mass, ΔNLL and JS averaged over
    layers, and ΔNLL at the last layer (the model's own output)."""
    dnll = per_sample_layer_means(samples, "dnll")  # [n, L]
    js = per_sample_layer_means(samples, "js")
    values = {
        "tool_mass": np.stack([tool_mass(s) for s in samples]).mean(axis=1),
        "dnll_mean": np.nanmean(dnll, axis=1),
        "dnll_final": dnll[:, -1],
        "js_mean": np.nanmean(js, axis=1),
    }
    rows = []
    for name, vals in values.items():
        r = ci_rows(vals[:, None], opts, quantity=name, **labels).drop(columns="layer")
        rows.append(r)
    return pd.concat(rows, ignore_index=True)


def head_frame(payloads: Mapping[str, dict], variants: Sequence[str]) -> pd.DataFrame:
    """Mean over tasks of each head's attention mass on the tool response (as run)."""
    frames = []
    for v in variants:
        key = f"head_mass.{v}"
        stack = [p[key] for p in payloads.values() if key in p]
        if not stack:
            continue
        mean = np.mean(np.stack(stack), axis=0)  # [L, H]
        layer, head = np.meshgrid(np.arange(mean.shape[0]), np.arange(mean.shape[1]), indexing="ij")
        frames.append(
            pd.DataFrame(
                {
                    "variant": v,
                    "layer": layer.ravel(),
                    "head": head.ravel(),
                    "mass": mean.ravel(),
                    "n": len(stack),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def mode_gap_frame(payloads: Mapping[str, dict], variants: Sequence[str]) -> pd.DataFrame:
    """How much position matching moved each metric: max and mean ``|position-matched −
    as run|`` over tasks, layers and semantic tokens, per variant."""
    rows = []
    for v in variants:
        gaps: dict[str, list[np.ndarray]] = {"dnll": [], "js": []}
        for pay in payloads.values():
            a, b = pair_diff(pay, v, "as_run"), pair_diff(pay, v, "position_matched")
            for m in gaps:
                gap = (a.metric(m) - b.metric(m)).abs()[:, a.semantic]
                gaps[m].append(array(gap).ravel())
        for m, parts in gaps.items():
            x = np.concatenate(parts)
            x = x[~np.isnan(x)]
            rows.append(
                {"variant": v, "metric": m, "max_abs": float(x.max()), "mean_abs": float(x.mean())}
            )
    return pd.DataFrame(rows)


def task_frame(payloads: Mapping[str, dict], variants: Sequence[str]) -> pd.DataFrame:
    """Per task: continuation length, tool-response tokens per variant, time spent."""
    rows = []
    for tid, pay in payloads.items():
        first = pair_diff(pay, variants[0], "as_run")
        row = {
            "task": tid,
            "n_tokens": len(first.tokens),
            "n_semantic": int(first.semantic.sum()),
            **{f"prompt_tokens_{k}": v for k, v in pay["prompt_tokens"].items()},
            **{f"tool_tokens_{k}": v for k, v in pay["tool_tokens"].items()},
            **{f"seconds_{k}": v for k, v in pay["seconds"].items()},
        }
        rows.append(row)
    return pd.DataFrame(rows)
