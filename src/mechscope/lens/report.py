"""Report section of the lens workflows: reopens the results from the run; never a model."""

from __future__ import annotations

import pandas as pd

from mechscope.lens.figures import (
    attention_figures,
    candidate_figures,
    curves_figure,
    progress_figure,
    sample_figure,
)
from mechscope.lens.layout import CANDIDATES_CURVES, TABLES
from mechscope.lens.result import CandidateResult, DiffResult
from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import ci_words, with_interval
from mechscope.runs import RunDir, has_table

DIFF_METHOD = (
    "**Paired teacher-forced lens.** The same continuation is teacher-forced after two "
    "prefixes (conditions A and B). For every layer and continuation token the true "
    "token's NLL is read through the model's own final norm and unembedding; ΔNLL = "
    "NLL(A) − NLL(B) (negative: A helps), JS and KL compare the two next-token "
    "distributions whatever the true token."
)


def _last_layer(curves: pd.DataFrame, metric: str) -> pd.Series:
    """The last layer's row of ``metric``'s curve over all samples (else the first group)."""
    part = curves[(curves["metric"] == metric) & (curves["kind"] == "curve")]
    group = "all" if (part["group"] == "all").any() else part["group"].iloc[0]
    part = part[part["group"] == group]
    return part.loc[part["layer"].idxmax()]


def diff_finding(result: DiffResult) -> str:
    """ΔNLL and JS at the model's output (the last layer), with their intervals."""
    a, b = result.contrast
    curves = result.tables["curves"]
    d, js = _last_layer(curves, "dnll"), _last_layer(curves, "js")
    verdict = f"{a} helps" if d["high"] < 0 else f"{b} helps" if d["low"] > 0 else "no clear winner"
    return (
        f"At the output, ΔNLL ({a} − {b}) of the continuation is "
        f"**{with_interval(d['mean'], d['low'], d['high'], missing='')} nats** ({verdict}; "
        f"{ci_words(int(d['n']), 'samples')}); JS between the two conditions' predictions "
        f"is {with_interval(js['mean'], js['low'], js['high'], 3)} nats."
    )


def diff_blocks(run: RunDir) -> tuple[str | None, list]:
    if not has_table(run, TABLES["curves"]):
        return None, []
    result = DiffResult.from_run(run)
    key = FigureBlock(curves_figure(result, "dnll"), name="lens-curve-dnll")
    more: list = [
        FigureBlock(sample_figure(result, "dnll"), name="lens-dnll"),
        FigureBlock(sample_figure(result, "js"), name="lens-js"),
        FigureBlock(curves_figure(result, "js"), name="lens-curve-js"),
    ]
    if (result.tables["curves"]["kind"] == "difference").any():
        fig = curves_figure(result, "dnll", "difference")
        more.append(FigureBlock(fig, name="lens-curve-dnll-difference"))
    aligned = result.tables["aligned"]
    for metric in ("dnll", "js"):
        if ((aligned["alignment"] == "progress") & (aligned["metric"] == metric)).any():
            fig = progress_figure(result, metric)
            more.append(FigureBlock(fig, name=f"lens-progress-{metric}"))
    if not result.tables["attention"].empty:
        more += [
            FigureBlock(fig, name=f"lens-attention-{k}")
            for k, fig in enumerate(attention_figures(result))
        ]
    blocks: list = [key, DetailsBlock(f"More figures ({len(more)})", more)]
    blocks.append(DetailsBlock("How this was computed", [TextBlock(DIFF_METHOD)]))
    if not result.tables["correlation_summary"].empty:
        blocks.append(
            TableBlock(
                result.tables["correlation_summary"],
                caption="Per-sample Pearson r between head-mean segment "
                "attention mass and ΔNLL over the layer × semantic-token grid: "
                "mean over samples with a 95% bootstrap CI.",
                title="Attention mass vs ΔNLL (Pearson r)",
            )
        )
    blocks.append(
        TableBlock(
            result.tables["samples"],
            caption="Samples: token counts, where the continuation "
            "starts in each condition, and the position id of its first "
            "semantic token.",
            title="Samples",
            source=f"tables/{TABLES['samples']}.parquet",
        )
    )
    return diff_finding(result), blocks


def candidate_finding(result: CandidateResult) -> str:
    """Which label wins at the last layer, and the margin there."""
    table, a, b = result.curves, result.label_a, result.label_b
    last = table[table["layer"] == table["layer"].max()].set_index("metric")
    win_a, win_b, margin = last.loc["win_a"], last.loc["win_b"], last.loc["margin"]
    return (
        f"At the last layer, {a} wins "
        f"{with_interval(win_a['mean'], win_a['low'], win_a['high'])} of samples and {b} "
        f"{with_interval(win_b['mean'], win_b['low'], win_b['high'])} "
        f"({ci_words(int(win_a['n']), 'samples')}); margin score({b}) − score({a}) "
        f"{with_interval(margin['mean'], margin['low'], margin['high'])}."
    )


def candidate_blocks(run: RunDir) -> tuple[str | None, list]:
    if not has_table(run, CANDIDATES_CURVES):
        return None, []
    result = CandidateResult.from_run(run)
    figs = [
        FigureBlock(f, name=f"lens-candidates-{i}") for i, f in enumerate(candidate_figures(result))
    ]
    blocks: list = [TextBlock("#### Candidate readout"), figs[0]]  # its finding: the section's
    method = (
        "**Candidate readout.** At the last prompt token each layer is read through the logit "
        "lens restricted to the candidate words."
    )
    if result.multi_token:
        method += (
            f" Candidates that are several tokens ({', '.join(sorted(result.multi_token))}) "
            f"are scored by policy '{result.policy}'."
        )
    blocks.append(
        DetailsBlock("Margin per layer, and how this was computed", [*figs[1:], TextBlock(method)])
    )
    return candidate_finding(result), blocks


@register_section("lens", "Lens: paired teacher-forced analysis and candidate readouts")
def lens_section(run: RunDir) -> list:
    diff_text, diff = diff_blocks(run)
    cand_text, cand = candidate_blocks(run)
    findings = [t for t in (diff_text, cand_text) if t]
    if not findings:
        return []
    return [FindingBlock(" ".join(findings)), *diff, *cand]
