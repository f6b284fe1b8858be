"""The report section of features: reads the run directory, never the model.

The section opens with the evaluation (explained variance, L0, CE recovered, dead
fraction per dictionary, with intervals) and the training curves; the metrics table, the
settings and the searchable feature dashboards follow behind disclosures.
"""

from __future__ import annotations

from mechscope.features.dashboard_html import dashboard_html
from mechscope.features.figures import metric_bars, training_curves
from mechscope.features.result import (
    EVAL_PART,
    EXPLAIN_PART,
    TRAIN_PART,
    EvalResult,
    ExplainResult,
    TrainingResult,
)
from mechscope.report import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import with_interval
from mechscope.runs import RunDir
from mechscope.runs.result import has_result

INTRO = (
    "A sparse dictionary reads one site (a transcoder: the MLP's input) and writes its "
    "reconstruction there (a transcoder: the MLP's output). Explained variance is against "
    "the mean, 1 − E‖x − x̂‖² / (E‖x‖² − ‖E x‖²); CE recovered is (CE_ablated − CE_spliced) / "
    "(CE_ablated − CE_clean) with the site zero-ablated (and mean-ablated), the splice at "
    "every position but the BOS; L0 is the mean number of active features per token; a "
    "feature is dead when it never fires on the evaluated tokens. Intervals are 95% "
    "bootstrap intervals resampling contexts."
)


def _finding(ev: EvalResult) -> str:
    parts = []
    for name in dict.fromkeys(ev.metrics["name"]):
        rows = ev.metrics[ev.metrics["name"] == name].set_index("metric")
        e = rows.loc["explained_variance"]
        text = f"{name}: explained variance **{with_interval(e.value, e.low, e.high)}**"
        if "ce_loss_score" in rows.index:
            c = rows.loc["ce_loss_score"]
            text += f", CE recovered {with_interval(c.value, c.low, c.high)}"
        text += f", L0 {rows.loc['l0'].value:.1f}"
        parts.append(text)
    shown = parts[:4] + ([f"… {len(parts) - 4} more in the table"] if len(parts) > 4 else [])
    return "On held-out tokens — " + "; ".join(shown) + "."


@register_section("features", "Features")
def features_section(run: RunDir) -> list[Block] | None:
    blocks: list[Block] = []
    ev = EvalResult.from_run(run) if has_result(run, EVAL_PART) else None
    tr = TrainingResult.from_run(run) if has_result(run, TRAIN_PART) else None
    ex = ExplainResult.from_run(run) if has_result(run, EXPLAIN_PART) else None
    if ev is None and tr is None and ex is None:
        return None
    if ev is not None:
        blocks.append(FindingBlock(_finding(ev)))
        blocks.append(FigureBlock(metric_bars(ev, "explained_variance", "explained variance")))
    if tr is not None:
        blocks.append(FigureBlock(training_curves(tr), name="features-training"))
    more: list[Block] = [TextBlock(INTRO)]
    if ev is not None:
        if "ce_loss_score" in set(ev.metrics["metric"]):
            more.append(FigureBlock(metric_bars(ev, "ce_loss_score", "CE loss recovered")))
        more.append(TableBlock(ev.table(), "Every metric of every dictionary on held-out tokens."))
    if tr is not None:
        more.append(TableBlock(tr.timing, "Training time per dictionary and its group's passes."))
        settings = {k: v for k, v in tr.settings.items() if k != "corpus"}
        more.append(KeyValueBlock(settings, caption="training settings"))
    blocks.append(DetailsBlock("How the metrics are computed, the tables and settings", more))
    if ex is not None and ex.dashboards:
        n = sum(len(b["features"]) for b in ex.dashboards.values())
        blocks.append(
            DetailsBlock(
                f"Feature dashboards ({n} features, searchable)",
                [TextBlock(dashboard_html(ex.dashboards))],
            )
        )
    return blocks
