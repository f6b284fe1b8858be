"""The report section of steering: reads the run directory, never the model."""

from __future__ import annotations

import numpy as np

from mechscope.report import (
    Block,
    FigureBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.runs import RunDir
from mechscope.runs.result import has_result
from mechscope.steering.figures import alpha_curve
from mechscope.steering.result import PART, SteeringResult


@register_section("steering", "Steering")
def steering_section(run: RunDir) -> list[Block] | None:
    if not has_result(run, PART):
        return None
    result = SteeringResult.from_run(run)
    norm = float(np.linalg.norm(result.vector)) if result.vector is not None else float("nan")
    blocks: list[Block] = [
        TextBlock(
            "Steering adds a direction to one site's activation at every position (α v), or "
            "removes its component (directional ablation), and measures what changes: the "
            "next-token metric of each prompt and its greedy continuation. The direction is "
            "the mean activation difference of contrastive pairs (contrastive activation "
            "addition) unless a vector was given."
        ),
        KeyValueBlock(
            {
                "site": result.site,
                "layer": result.layer,
                "head": "-" if result.head is None else result.head,
                "mode": result.mode,
                "alphas": ", ".join(f"{a:g}" for a in result.alphas),
                "vector norm": f"{norm:.4g}",
                "prompts": len(result.prompt_ids),
            },
            caption="what was steered",
        ),
    ]
    for metric in ("logit_diff", "target_prob"):
        if not np.isnan(result.metrics[metric]).all():
            blocks.append(FigureBlock(alpha_curve(result, metric), name=f"steering-{metric}"))
    if result.generations:
        blocks.append(
            TableBlock(
                result.generations_frame(), "greedy continuations at each α (α = 0: unsteered)"
            )
        )
    return blocks
