"""The figure of a direct logit attribution (:mod:`mechscope.engine.analysis.attribution`): a
function of the result, as every figure is, drawn where figures are drawn.
``LogitAttribution.figure()`` calls it (through :mod:`mechscope.bindings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mechscope.report.builders import heatmap
from mechscope.report.figure import Figure

if TYPE_CHECKING:
    from mechscope.engine.analysis.attribution import LogitAttribution


def logit_attribution_figure(dla: LogitAttribution) -> Figure:
    """Heads × layers heatmap of ``dla``'s mean attribution over rows (it needs its heads:
    a cache with ``z``)."""
    if dla.heads is None:
        raise KeyError("no head attribution: cache z")
    z = dla.heads.mean(0).numpy()  # [L, H]
    return heatmap(
        z,
        [f"H{h}" for h in range(z.shape[1])],
        [f"L{l}" for l in range(z.shape[0])],
        f"Direct logit attribution of {dla.label} per head",
        diverging=True,
        colorbar_title="logit difference",
        x_title="head",
        y_title="layer",
    )
