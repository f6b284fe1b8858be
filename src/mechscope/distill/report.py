"""Report section of the distill workflow (reads the summary tables; never runs a model)."""

from __future__ import annotations

import pandas as pd

from mechscope.distill.experiments import format_purity
from mechscope.distill.figures import summary_figures
from mechscope.distill.gradients import gradient_figures
from mechscope.distill.intervals import format_contrasts
from mechscope.distill.margins import format_margins, has_margins
from mechscope.distill.result import DistillResult
from mechscope.distill.robustness import format_robustness
from mechscope.distill.summarize import format_summary
from mechscope.distill.sweep import format_sweep, sweep_figure
from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import with_interval
from mechscope.runs import RunDir, has_table, read_table

INTRO = (
    "Each trial distils the teacher into a student with one method and one seed. "
    "**Causal consistency** is the Pearson correlation between the teacher's and the student's "
    "responses to the same activation patch (the clean run gets the corrupt run's residual at "
    "a causal checkpoint; each model uses its own corrupt value), pooled over checkpoints and "
    "test pairs. Accuracy is the share of test pairs where the correct answer beats the wrong "
    "one; OOD degradation is test accuracy minus OOD accuracy; perplexity is on held-out text. "
    "Cells are the mean over training seeds with its 95 % Student-t interval in brackets (the "
    "task's pairs fixed); 'untrained' is the student before distillation, the teacher's row "
    "what the students are read against. Consistency's reference levels: 'mapping shuffled' "
    "reads each teacher checkpoint against the student's effects at another checkpoint's "
    "site (the floor a student reaches without responding where the teacher does); the "
    "split-half ceiling correlates the teacher's checkpoint profile on two halves of the "
    "test pairs."
)
CONTRASTS = (
    "Method differences, paired by seed (same student initialisation and batch order): mean "
    "of method − reference over seeds, 95 % interval and p-value of the paired t-test; "
    "where the trials kept their per-pair results, a second 95 % interval from a bootstrap "
    "over seeds and, within each, test pairs (the pairs' sampling included), and the "
    "p-values adjusted over the part's contrasts (Holm: family-wise error; BH: false "
    "discovery rate)."
)
MARGINS = (
    "The task's margin: the mean clean logit difference (correct − wrong answer) of the "
    "teacher and of each student on the same test pairs, and the student's on its last "
    "training batch. Where the loss terms' gradients were logged: the cosine between each "
    "weighted term's step (minus its gradient) and the margin's gradient on the training "
    "batch, mean over the logged steps, raw and with the step after AdamW's per-parameter "
    "scaling. Below 0, that term's step lowers the margin: it works against the task."
)
#: The figure the section leads with.
KEY_FIGURE = "consistency-by-method"


SWEEP = (
    "Loss weights: each variant of a method against output-only KD with the same seeds. "
    "'learns' = mean accuracy within 0.05 of KD's; 'more mechanism' = the seed-paired "
    "difference in per-checkpoint consistency has its 95 % interval above 0. grad cos and "
    "the norm ratio compare the weighted KL and method terms' gradients on the student."
)
ROBUSTNESS = (
    "Experiment 3: Pearson correlation between a distilled student's consistency and its "
    "OOD degradation, over every distilled student of a task, with Fisher-z and cluster "
    "bootstrap 95 % intervals (methods resampled, then students within each: students of "
    "one method are not independent), Spearman's rho, and the partial correlation given "
    "test accuracy."
)
PURITY = (
    "Experiment 4: probe selectivity (task − control accuracy, 5-fold cross-validated) of the "
    "teacher's clean state h and contrastive difference d at unmodified positions of the "
    "checkpoint layers; intervals are 95 % Student-t over pairs, d − h paired by pair. "
    "The control-task columns use Hewitt & Liang's control: each token type gets one fixed "
    "random label; the types are the clean tokens at the position or, where that token is "
    "the same in nearly every pair, at the first key position whose token varies ('types "
    "from')."
)

#: The teacher-side and per-checkpoint tables, in report order, with how to read them.
TABLE_CAPTIONS = {
    "distill_checkpoints": (
        "The teacher's causal checkpoints per task: (layer, key position) ranked by the mean "
        "norm of the contrastive difference among the sites where the teacher's own patch "
        "moves its logit difference (the effect screen); 'modified' positions hold the "
        "changed token; teacher_delta_test is the teacher's mean patch effect on the test "
        "pairs."
    ),
    "distill_checkpoint_consistency": (
        "Per checkpoint (means over seeds): the teacher's and the student's mean patch effect "
        "Δ = LD(clean) − LD(patched) and their Pearson over test pairs. A negative student "
        "effect where the teacher's is positive is a response of the opposite sign, not a "
        "sign error."
    ),
    "distill_purity": (
        "Information purity at unmodified positions: logistic-regression probe accuracy for "
        "the task label and a control label, from the clean representation h or the "
        "contrastive difference d; selectivity = task − control. The control-task columns "
        "(hl_*) are in the file and in experiment 4's tables above."
    ),
}

#: Columns a table keeps in its file but not on the page (shown in a table above, and the
#: page's width is a section's).
IN_FILE_ONLY = {
    "distill_purity": (
        "hl_control_acc", "hl_selectivity", "hl_ci_low", "hl_ci_high", "hl_type_position",
    )
}  # fmt: skip


def experiment_blocks(run: RunDir) -> list:
    """The loss-weight sweep (table and figures), experiment 3's correlation and experiment
    4's purity with intervals, from the tables ``distill summarize`` wrote."""
    blocks: list = []
    if has_table(run, "distill_sweep"):
        sweep = read_table(run, "distill_sweep")
        blocks += [TextBlock(SWEEP), TextBlock(format_sweep(sweep))]
        fig = sweep_figure(sweep)
        if fig is not None:
            blocks.append(FigureBlock(fig, name="distill-lambda-sweep"))
    if has_table(run, "distill_gradients"):
        for stem, fig in gradient_figures(read_table(run, "distill_gradients")).items():
            blocks.append(FigureBlock(fig, name=f"distill-{stem}"))
    if has_table(run, "distill_robustness"):
        blocks += [TextBlock(ROBUSTNESS)]
        blocks.append(TextBlock(format_robustness(read_table(run, "distill_robustness"))))
    if has_table(run, "distill_purity"):
        purity = read_table(run, "distill_purity")
        if "ci_low" in purity:
            blocks += [TextBlock(PURITY), TextBlock(format_purity(purity))]
    return blocks


def distill_finding(summary: pd.DataFrame) -> str:
    """Causal consistency and accuracy of every method (first student and task), each with
    its interval over seeds."""
    student, task = summary[["student", "task"]].iloc[0]
    rows = summary[(summary["student"] == student) & (summary["task"] == task)]

    def cells(metric: str) -> str:
        out = []
        for _, r in rows.iterrows():
            low, high = r[f"{metric}_ci_low"], r[f"{metric}_ci_high"]
            out.append(f"{r['method']} {with_interval(r[f'{metric}_mean'], low, high, missing='')}")
        return ", ".join(out)

    seeds = rows["n_seeds"].astype(int)
    words = (
        "n = 1 seed per method, so no intervals"
        if seeds.max() < 2
        else f"95 % t-intervals over {seeds.min()}–{seeds.max()} seeds"
    )
    return (
        f"On {task} ({student}), causal consistency with the teacher: {cells('consistency')}; "
        f"test accuracy: {cells('accuracy')} ({words})."
    )


@register_section("distill", "Distillation: does the student keep the teacher's mechanism?")
def distill_section(run: RunDir) -> list:
    if not has_table(run, "distill_summary") and not has_table(run, "distill_checkpoints"):
        return []
    blocks: list = []
    summary = read_table(run, "distill_summary") if has_table(run, "distill_summary") else None
    if summary is not None and not summary.empty:
        blocks.append(FindingBlock(distill_finding(summary)))
    figures = []
    if has_table(run, "distill_trials"):
        result = DistillResult.from_run(run)
        figs = summary_figures(result)
        figures = [FigureBlock(figs.pop(KEY_FIGURE), name=f"distill-{KEY_FIGURE}")]
        figures += [FigureBlock(fig, name=f"distill-{stem}") for stem, fig in figs.items()]
    if figures:
        blocks.append(figures.pop(0))
    if figures:
        blocks.append(DetailsBlock(f"More figures ({len(figures)})", figures))
    tables: list = []
    if summary is not None:
        teacher = read_table(run, "distill_teacher") if has_table(run, "distill_teacher") else None
        tables.append(TextBlock(format_summary(summary, teacher)))
    if has_table(run, "distill_contrasts"):
        tables += [
            TextBlock(CONTRASTS),
            TextBlock(format_contrasts(read_table(run, "distill_contrasts"))),
        ]
    if summary is not None and has_margins(summary):
        tables += [TextBlock(MARGINS), TextBlock(format_margins(summary))]
    if tables:
        blocks.append(DetailsBlock("Summary per method, method differences and margins", tables))
    blocks += experiment_blocks(run)
    blocks.append(DetailsBlock("How this was computed", [TextBlock(INTRO)]))
    for name, caption in TABLE_CAPTIONS.items():
        if has_table(run, name):
            table = read_table(run, name).drop(columns=list(IN_FILE_ONLY.get(name, ())),
                                               errors="ignore")  # fmt: skip
            blocks.append(TableBlock(table, caption=caption, source=f"tables/{name}.parquet"))
    return blocks
