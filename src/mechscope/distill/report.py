"""Report section of the distill workflow (reads the summary tables; never runs a model)."""

from __future__ import annotations

from mechscope.distill.figures import summary_figures
from mechscope.distill.intervals import format_contrasts
from mechscope.distill.result import DistillResult
from mechscope.distill.summarize import format_summary
from mechscope.report import FigureBlock, TableBlock, TextBlock, register_section
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
    "what the students are read against."
)
CONTRASTS = (
    "Method differences, paired by seed (same student initialisation and batch order): mean "
    "of method − reference over seeds, 95 % interval and p-value of the paired t-test."
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
        "contrastive difference d; selectivity = task − control."
    ),
}


@register_section("distill", "Distillation: does the student keep the teacher's mechanism?")
def distill_section(run: RunDir) -> list:
    if not has_table(run, "distill_summary") and not has_table(run, "distill_checkpoints"):
        return []
    blocks: list = [TextBlock(INTRO)]
    if has_table(run, "distill_summary"):
        teacher = read_table(run, "distill_teacher") if has_table(run, "distill_teacher") else None
        blocks.append(TextBlock(format_summary(read_table(run, "distill_summary"), teacher)))
    if has_table(run, "distill_contrasts"):
        blocks.append(TextBlock(CONTRASTS))
        blocks.append(TextBlock(format_contrasts(read_table(run, "distill_contrasts"))))
    if has_table(run, "distill_trials"):
        result = DistillResult.from_run(run)
        for stem, fig in summary_figures(result).items():
            blocks.append(FigureBlock(fig, name=f"distill-{stem}"))
    for name, caption in TABLE_CAPTIONS.items():
        if has_table(run, name):
            blocks.append(TableBlock(read_table(run, name), caption=caption))
    return blocks
