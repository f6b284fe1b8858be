"""Report section of the lens workflows (reads saved tables; never loads a model)."""

from __future__ import annotations

from mechscope.lens.figures import (
    aligned_heatmap,
    attention_figure,
    candidate_figures,
    metric_curves_figure,
    sample_heatmap,
)
from mechscope.lens.run import CANDIDATES_CURVES, TABLES
from mechscope.report import FigureBlock, TableBlock, TextBlock, register_section
from mechscope.runs import RunDir, has_table, read_table


def diff_blocks(run: RunDir) -> list:
    if not has_table(run, TABLES["curves"]):
        return []
    blocks: list = [
        TextBlock(
            "**Paired teacher-forced lens.** The same continuation is teacher-forced after two "
            "prefixes (conditions A and B). For every layer and continuation token the true "
            "token's NLL is read through the model's own final norm and unembedding; ΔNLL = "
            "NLL(A) − NLL(B) (negative: A helps), JS and KL compare the two next-token "
            "distributions."
        )
    ]
    tokens = read_table(run, TABLES["tokens"])
    samples = read_table(run, TABLES["samples"])
    names = (str(samples["condition_a"].iloc[0]), str(samples["condition_b"].iloc[0]))
    contrast = f"{names[0]} − {names[1]}"
    first = str(samples["sample"].iloc[0])
    blocks.append(
        FigureBlock(sample_heatmap(tokens, first, "dnll", contrast, names), name="lens-dnll")
    )
    blocks.append(FigureBlock(sample_heatmap(tokens, first, "js", contrast, names), name="lens-js"))
    curves = read_table(run, TABLES["curves"])
    for metric in ("dnll", "js"):
        blocks.append(
            FigureBlock(
                metric_curves_figure(curves, metric, names=names), name=f"lens-curve-{metric}"
            )
        )
    if (curves["kind"] == "difference").any():
        blocks.append(
            FigureBlock(
                metric_curves_figure(curves, "dnll", "difference", names),
                name="lens-curve-dnll-difference",
            )
        )
    if has_table(run, TABLES["aligned"]):
        aligned = read_table(run, TABLES["aligned"])
        for metric in ("dnll", "js"):
            if ((aligned["alignment"] == "progress") & (aligned["metric"] == metric)).any():
                blocks.append(
                    FigureBlock(
                        aligned_heatmap(aligned, metric, names=names),
                        name=f"lens-progress-{metric}",
                    )
                )
    if has_table(run, TABLES["attention"]):
        att = read_table(run, TABLES["attention"])
        for k, cond in enumerate(att["condition"].unique()):
            blocks.append(FigureBlock(attention_figure(att, str(cond)), name=f"lens-attention-{k}"))
    if has_table(run, TABLES["correlation_summary"]):
        blocks.append(
            TableBlock(
                read_table(run, TABLES["correlation_summary"]),
                caption="Per-sample Pearson r between head-mean segment "
                "attention mass and ΔNLL over the layer × semantic-token grid: "
                "mean over samples with a 95% bootstrap CI.",
            )
        )
    blocks.append(
        TableBlock(
            samples,
            caption="Samples: token counts, where the continuation "
            "starts in each condition, and the position id of its first "
            "semantic token.",
        )
    )
    return blocks


def candidate_blocks(run: RunDir) -> list:
    if not has_table(run, CANDIDATES_CURVES):
        return []
    table = read_table(run, CANDIDATES_CURVES)
    blocks: list = [
        TextBlock(
            "**Candidate readout.** At the last prompt token each layer is read through the logit "
            "lens restricted to the candidate words."
        )
    ]
    multi = str(table["multi_token"].iloc[0]) if "multi_token" in table else ""
    if multi:
        blocks.append(
            TextBlock(
                f"Candidates that are several tokens ({multi}) are scored by "
                f"policy '{table['policy'].iloc[0]}'."
            )
        )
    blocks += [
        FigureBlock(f, name=f"lens-candidates-{i}") for i, f in enumerate(candidate_figures(table))
    ]
    return blocks


@register_section("lens", "Lens: paired teacher-forced analysis and candidate readouts")
def lens_section(run: RunDir) -> list:
    return diff_blocks(run) + candidate_blocks(run)
