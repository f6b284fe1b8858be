"""Report section of the overview: the logit-lens heatmap and table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.overview.compute import probability_matrix
from mechscope.overview.demo import TABLE
from mechscope.report import FigureBlock, FindingBlock, TableBlock, heatmap, register_section
from mechscope.report.findings import number
from mechscope.runs import RunDir, has_table, read_table


def overview_finding(df: pd.DataFrame) -> str:
    """When the final prediction becomes the lens' top-1 token (median and range over
    prompts), and its probability at the output."""
    n_layers = int(df["layer"].max()) + 1
    first = []
    for _, g in df.sort_values("layer").groupby("prompt_id"):
        top = g.index[g["target_rank"].to_numpy() == 0]
        first.append(int(g.loc[top[0], "layer"]) if len(top) else n_layers - 1)
    last = df[df["layer"] == df["layer"].max()]["target_prob"].to_numpy()
    return (
        f"The model's final prediction becomes the logit lens' top token at layer "
        f"**{np.median(first):g}** of {n_layers} (median over {len(first)} prompts; range "
        f"{min(first)}–{max(first)}); at the output it has probability {number(last.mean())} "
        f"on average (range {number(last.min())}–{number(last.max())})."
    )


@register_section("overview", "Model overview: logit lens")
def overview_section(run: RunDir) -> list:
    if not has_table(run, TABLE):
        return []
    df = read_table(run, TABLE)
    z, labels, layers = probability_matrix(df)
    top = df.pivot(index="prompt_id", columns="layer", values="top_token").sort_index()
    hover = [[f"layer top-1: {t!r}" for t in row] for row in top.to_numpy()]
    fig = heatmap(
        z,
        x_labels=layers,
        y_labels=labels,
        title="Probability of the final prediction, read at each layer (logit lens)",
        hover_text=hover,
        colorbar_title="p",
        x_title="layer",
        y_title="prompt → final prediction",
        caption=(
            "How to read this: each cell is the probability the model's own final norm and "
            "unembedding give to its final answer when applied to that layer's residual "
            "stream at the last prompt token; the last column is the model's output. Early "
            "layers of the logit lens are often uninformative, not wrong."
        ),
    )
    last = df[df.layer == df.layer.max()][["prompt", "target", "target_prob"]]
    final = TableBlock(
        last,
        caption="The model's final prediction per prompt.",
        source=f"tables/{TABLE}.parquet",
        prose=["prompt"],
    )
    return [FindingBlock(overview_finding(df)), FigureBlock(fig, name="overview-logit-lens"), final]
