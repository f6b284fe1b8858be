"""The report's blocks of a graph check (:mod:`mechscope.graphs.check`): read from the run.

A finding (how closely the frozen replacement follows the graph's prediction, and how the
model itself follows it, overall and where the change stays near the graph's linear
regime), a scatter of predicted against measured changes, and the table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.report import Block, FigureBlock, FindingBlock, TableBlock, scatter
from mechscope.runs import RunDir
from mechscope.runs.tables import has_table, read_table

#: The check's table (written by :func:`mechscope.graphs.check.run_check`).
TABLE = "graph_interventions"
COLUMNS = ["label", "intervention", "target", "clean", "predicted_direct", "predicted",
           "measured_frozen", "measured_live", "switched"]  # fmt: skip


def _agreement(predicted: pd.Series, measured: pd.Series) -> str:
    """The correlation and the same-sign share of two columns, in words."""
    ok = predicted.notna() & measured.notna()
    p, m = predicted[ok].to_numpy(), measured[ok].to_numpy()
    if len(p) < 2 or p.std() == 0 or m.std() == 0:
        return "too few values to compare"
    r = float(np.corrcoef(p, m)[0, 1])
    return f"r = {r:.2f}, same sign in {int((np.sign(p) == np.sign(m)).sum())} of {len(p)}"


def check_blocks(run: RunDir, n_active: int) -> list[Block]:
    """The blocks of the module docstring (``n_active``: the prompt's active features), or
    none without a check."""
    if not has_table(run, TABLE):
        return []
    t = read_table(run, TABLE)
    gap = (t["measured_frozen"] - t["predicted"]).abs().max()
    near = t[t["switched"] <= n_active / 100]
    finding = (
        f"**Checking the graph's claims** ({len(t)} interventions and targets): the frozen "
        f"replacement model moves as the graph predicts (largest difference {gap:.2g}, "
        f"predictions up to {t['predicted'].abs().max():.3g}). The model itself: "
        f"{_agreement(t['predicted'], t['measured_live'])}; over the {len(near)} where the "
        f"transcoders' rule would switch at most 1 % of the active features, "
        f"{_agreement(near['predicted'], near['measured_live'])}."
    )
    n = len(t)
    fig = scatter(
        pd.concat([t["predicted"], t["predicted"]]).to_numpy(),
        pd.concat([t["measured_frozen"], t["measured_live"]]).to_numpy(),
        "Interventions on graph nodes: predicted vs measured change of the target",
        "predicted by the graph", "measured",
        text=[f"{a} {b} → {c}" for a, b, c in zip(t["label"], t["intervention"], t["target"],
                                                  strict=True)] * 2,
        groups=["frozen replacement"] * n + ["model"] * n,
        diagonal=True,
        caption="Each point is one intervention (a node or supernode ablated or steered) "
        "and one target (a demeaned logit or a difference): the change the graph predicts "
        "along its paths against the change measured in the frozen replacement model and in "
        "the model itself. On the dashed line they agree.",
    )  # fmt: skip
    return [
        FindingBlock(finding),
        FigureBlock(fig, name="graphs-check"),
        TableBlock(
            t[COLUMNS],
            "Each intervention and target: the target's clean value, the change predicted "
            "by the direct edges and along every path of the graph, the change measured in "
            "the frozen replacement and in the model, and how many features the transcoders' "
            "own rule would switch on or off in the frozen replacement (held there: how far "
            "the change leaves the graph's linear regime).",
            source=f"tables/{TABLE}.parquet",
        ),
    ]
