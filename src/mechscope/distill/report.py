"""Report section of the distill workflow (reads the summary tables; never runs a model)."""

from __future__ import annotations

from mechscope.distill.summarize import format_summary, summary_figures
from mechscope.report import FigureBlock, TableBlock, TextBlock, register_section
from mechscope.runs import RunDir, has_table, read_table

INTRO = (
    "Each trial distils the teacher into a student with one method and one seed. "
    "**Causal consistency** is the Pearson correlation between the teacher's and the student's "
    "responses to the same activation patch (the clean run gets the corrupt run's residual at "
    "a causal checkpoint; each model uses its own corrupt value), pooled over checkpoints and "
    "test pairs. Accuracy is the share of test pairs where the correct answer beats the wrong "
    "one; OOD degradation is test accuracy minus OOD accuracy; perplexity is on held-out text. "
    "Cells are mean ± standard deviation over seeds."
)


@register_section(
    "distill", "Distillation: does the student keep the teacher's mechanism?", order=60
)
def distill_section(run: RunDir) -> list:
    if not has_table(run, "distill_summary") and not has_table(run, "distill_checkpoints"):
        return []
    blocks: list = [TextBlock(INTRO)]
    if has_table(run, "distill_summary"):
        blocks.append(TextBlock(format_summary(read_table(run, "distill_summary"))))
    if has_table(run, "distill_trials"):
        trials = read_table(run, "distill_trials")
        for stem, fig in summary_figures(trials).items():
            blocks.append(FigureBlock(fig, name=f"distill-{stem}"))
    if has_table(run, "distill_checkpoints"):
        blocks.append(
            TableBlock(
                read_table(run, "distill_checkpoints"),
                caption=(
                    "The teacher's causal checkpoints per task: (layer, key position) ranked by "
                    "the mean norm of the contrastive difference; 'modified' positions hold the "
                    "changed token."
                ),
            )
        )
    if has_table(run, "distill_purity"):
        blocks.append(
            TableBlock(
                read_table(run, "distill_purity"),
                caption=(
                    "Information purity at unmodified positions: logistic-regression probe "
                    "accuracy for the task label and a control label, from the clean "
                    "representation h or the "
                    "contrastive difference d; selectivity = task − control."
                ),
            )
        )
    return blocks
