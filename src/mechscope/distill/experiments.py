"""The plan's experiments 1-5 read off a study: the tables and figures beyond the summary.

:func:`experiment_tables` writes, next to the summary tables of
:mod:`mechscope.distill.summarize`:

- ``distill_sweep`` (loss-weight variants against KD: :mod:`mechscope.distill.sweep`) and
  ``distill_gradients`` (the two loss terms' gradients over training:
  :mod:`mechscope.distill.gradients`), with their figures;
- ``distill_robustness`` (experiment 3: consistency against OOD degradation over every
  distilled student, :mod:`mechscope.distill.robustness`);

and returns the Markdown of each, with experiment 4's purity table
(:func:`format_purity`, from ``distill_purity``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mechscope.distill.gradients import gradient_figures, gradient_table
from mechscope.distill.robustness import format_robustness, robustness_table
from mechscope.distill.sweep import fmt_interval as _ci
from mechscope.distill.sweep import format_sweep, sweep_figure, sweep_table
from mechscope.report import Figure
from mechscope.runs import RunDir, write_table


def format_purity(purity: pd.DataFrame) -> str:
    """Markdown: per task, layer and unmodified position, task and control probe accuracy
    and selectivity of ``h`` and of ``d`` (95 % interval over pairs), ``d − h``; and where
    the table has it, a second table of the selectivity against Hewitt & Liang's control
    task, with the key position whose tokens are its types (two tables, so each fits a
    page's width)."""
    head = [
        "task", "layer", "position", "checkpoint", "h: task / control", "h: selectivity",
        "d: task / control", "d: selectivity", "selectivity d − h", "pairs",
    ]  # fmt: skip
    if "ci_low" not in purity:
        return "(a purity table without intervals: rerun the study to recompute it)"
    hl = "hl_selectivity" in purity
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    hl_head = ["task", "layer", "position", "types from", "h: selectivity", "d: selectivity",
               "pairs"]  # fmt: skip
    hl_lines = ["| " + " | ".join(hl_head) + " |", "|" + "---|" * len(hl_head)]
    for (task, layer, pos), g in purity.groupby(["task", "layer", "position"], sort=False):
        h = g[g["representation"] == "h"].iloc[0]
        d = g[g["representation"] == "d"].iloc[0]
        ckpt = "yes" if bool(g.get("checkpoint", pd.Series([False])).iloc[0]) else "no"
        cells = [
            task,
            str(layer),
            pos,
            ckpt,
            f"{h.task_acc:.3f} / {h.control_acc:.3f}",
            _ci(h.selectivity, h.ci_low, h.ci_high, signed=True),
            f"{d.task_acc:.3f} / {d.control_acc:.3f}",
            _ci(d.selectivity, d.ci_low, d.ci_high, signed=True),
            _ci(d.d_minus_h, d.d_minus_h_ci_low, d.d_minus_h_ci_high, signed=True),
            str(int(d.n)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
        if hl:
            sel = [_ci(x.hl_selectivity, x.hl_ci_low, x.hl_ci_high, signed=True) for x in (h, d)]
            by = h.get("hl_type_position")
            typed_by = pos if pd.isna(by) else str(by)  # older tables: the position's own
            cells = [task, str(layer), pos, typed_by, *sel, str(int(d.n))]
            hl_lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    if not hl:
        return table
    lead = (
        "Selectivity against the control task (one random label per token type; the types "
        "are the clean tokens at the position in 'types from'):"
    )
    return "\n\n".join([table, lead, "\n".join(hl_lines)])


def experiment_tables(
    study: Path, trials: pd.DataFrame | None, purity: pd.DataFrame, out: RunDir
) -> tuple[dict[str, str], dict[str, Figure]]:
    """Write the sweep, gradient and robustness tables into ``out``; return the Markdown of
    each experiment present (keys ``sweep``, ``robustness``, ``purity``) and the figures."""
    text: dict[str, str] = {}
    figs: dict[str, Figure] = {}
    if trials is not None:
        sweep = sweep_table(trials)
        if not sweep.empty:
            write_table(out, "distill_sweep", sweep)
            text["sweep"] = format_sweep(sweep)
            fig = sweep_figure(sweep)
            if fig is not None:
                figs["lambda-sweep"] = fig
        grads = gradient_table(study)
        if not grads.empty:
            write_table(out, "distill_gradients", grads)
            figs.update(gradient_figures(grads))
        robust = robustness_table(trials)
        if not robust.empty:
            write_table(out, "distill_robustness", robust)
            text["robustness"] = format_robustness(robust)
    if not purity.empty:
        text["purity"] = format_purity(purity)
    return text, figs
