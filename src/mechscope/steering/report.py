"""The report section of steering: reads the run directory, never the model.

The section opens with the sweep's largest change of the metric (with its interval over
prompts) and the α curve; how steering works, the settings and the continuations sit behind
disclosures.
"""

from __future__ import annotations

import numpy as np

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
from mechscope.report.findings import ci_words, with_interval
from mechscope.runs import RunDir
from mechscope.runs.result import has_result
from mechscope.runs.tensors import array
from mechscope.stats import cell_ci
from mechscope.steering.figures import alpha_curve
from mechscope.steering.result import PART, SteeringResult

INTRO = (
    "Steering adds a direction to one site's activation at every position (α v), or removes "
    "its component (directional ablation), and measures what changes: the next-token metric "
    "of each prompt and its greedy continuation. The direction is the mean activation "
    "difference of contrastive pairs (contrastive activation addition) unless a vector was "
    "given."
)


def largest_change(result: SteeringResult, metric: str) -> str:
    """The α whose mean change of ``metric`` from the unsteered run is largest in size, with
    its interval over prompts, in words."""
    change = array(result.change(metric))  # [prompts, alphas]
    ci = cell_ci(change)  # [alphas]
    if not np.isfinite(ci.mean).any():
        return f"no finite change of {metric}"
    a = int(np.nanargmax(np.abs(ci.mean)))
    value = with_interval(ci.mean[a], ci.low[a], ci.high[a], missing="")
    where = f"{result.site} at layer {result.layer}"
    if result.feature is not None:
        where = f"feature {result.feature} ({where})"
    zero = "the feature off (α = 0)" if result.mode == "clamp" else "the unsteered run"
    return (
        f"{result.mode} at {where}: α = {float(result.alphas[a]):g} changes the {metric} by "
        f"**{value}** from {zero} ({ci_words(change.shape[0], 'prompts')})"
    )


@register_section("steering", "Steering")
def steering_section(run: RunDir) -> list[Block] | None:
    if not has_result(run, PART):
        return None
    result = SteeringResult.from_run(run)
    metrics = [m for m in ("logit_diff", "target_prob") if not result.metrics[m].isnan().all()]
    finding = largest_change(result, metrics[0]) + "." if metrics else "No metric was measured."
    figures = [FigureBlock(alpha_curve(result, m), name=f"steering-{m}") for m in metrics]
    blocks: list[Block] = [FindingBlock(finding), *figures[:1]]
    if figures[1:]:
        blocks.append(DetailsBlock(f"{len(figures) - 1} more figure(s)", figures[1:]))
    norm = float(result.vector.norm()) if result.vector is not None else float("nan")
    settings = {
        "site": result.site,
        "layer": result.layer,
        "head": "-" if result.head is None else result.head,
        "feature": "-" if result.feature is None else result.feature,
        "mode": result.mode,
        "alphas": ", ".join(f"{a:g}" for a in result.alphas.tolist()),
        "vector norm": f"{norm:.4g}",
        "prompts": len(result.prompt_ids),
    }
    blocks.append(
        DetailsBlock(
            "How steering is computed, and what was steered",
            [TextBlock(INTRO), KeyValueBlock(settings, caption="what was steered")],
        )
    )
    if result.generations:
        generations = result.generations_frame()
        blocks.append(
            DetailsBlock(
                "Greedy continuations at each α",
                [
                    TableBlock(
                        generations,
                        "greedy continuations at each α (α = 0: "
                        + ("the feature off)" if result.mode == "clamp" else "unsteered)"),
                        title="Greedy continuations at each α",
                        prose=list(generations.columns),  # prompts and what the model wrote
                    )
                ],
            )
        )
    return blocks
