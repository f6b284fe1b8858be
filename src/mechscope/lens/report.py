"""Report section of the lens workflows: reopens the results from the run; never a model."""

from __future__ import annotations

from mechscope.lens.figures import (
    attention_figures,
    candidate_figures,
    curves_figure,
    progress_figure,
    sample_figure,
)
from mechscope.lens.layout import CANDIDATES_CURVES, TABLES
from mechscope.lens.result import CandidateResult, DiffResult
from mechscope.report import FigureBlock, TableBlock, TextBlock, register_section
from mechscope.runs import RunDir, has_table


def diff_blocks(run: RunDir) -> list:
    if not has_table(run, TABLES["curves"]):
        return []
    result = DiffResult.from_run(run)
    blocks: list = [
        TextBlock(
            "**Paired teacher-forced lens.** The same continuation is teacher-forced after two "
            "prefixes (conditions A and B). For every layer and continuation token the true "
            "token's NLL is read through the model's own final norm and unembedding; ΔNLL = "
            "NLL(A) − NLL(B) (negative: A helps), JS and KL compare the two next-token "
            "distributions."
        )
    ]
    blocks.append(FigureBlock(sample_figure(result, "dnll"), name="lens-dnll"))
    blocks.append(FigureBlock(sample_figure(result, "js"), name="lens-js"))
    for metric in ("dnll", "js"):
        blocks.append(FigureBlock(curves_figure(result, metric), name=f"lens-curve-{metric}"))
    if (result.tables["curves"]["kind"] == "difference").any():
        blocks.append(
            FigureBlock(
                curves_figure(result, "dnll", "difference"), name="lens-curve-dnll-difference"
            )
        )
    aligned = result.tables["aligned"]
    if not aligned.empty:
        for metric in ("dnll", "js"):
            if ((aligned["alignment"] == "progress") & (aligned["metric"] == metric)).any():
                blocks.append(
                    FigureBlock(progress_figure(result, metric), name=f"lens-progress-{metric}")
                )
    if not result.tables["attention"].empty:
        blocks += [
            FigureBlock(fig, name=f"lens-attention-{k}")
            for k, fig in enumerate(attention_figures(result))
        ]
    if not result.tables["correlation_summary"].empty:
        blocks.append(
            TableBlock(
                result.tables["correlation_summary"],
                caption="Per-sample Pearson r between head-mean segment "
                "attention mass and ΔNLL over the layer × semantic-token grid: "
                "mean over samples with a 95% bootstrap CI.",
            )
        )
    blocks.append(
        TableBlock(
            result.tables["samples"],
            caption="Samples: token counts, where the continuation "
            "starts in each condition, and the position id of its first "
            "semantic token.",
        )
    )
    return blocks


def candidate_blocks(run: RunDir) -> list:
    if not has_table(run, CANDIDATES_CURVES):
        return []
    result = CandidateResult.from_run(run)
    blocks: list = [
        TextBlock(
            "**Candidate readout.** At the last prompt token each layer is read through the logit "
            "lens restricted to the candidate words."
        )
    ]
    if result.multi_token:
        blocks.append(
            TextBlock(
                f"Candidates that are several tokens ({', '.join(sorted(result.multi_token))}) "
                f"are scored by policy '{result.policy}'."
            )
        )
    blocks += [
        FigureBlock(f, name=f"lens-candidates-{i}") for i, f in enumerate(candidate_figures(result))
    ]
    return blocks


@register_section("lens", "Lens: paired teacher-forced analysis and candidate readouts")
def lens_section(run: RunDir) -> list:
    return diff_blocks(run) + candidate_blocks(run)
