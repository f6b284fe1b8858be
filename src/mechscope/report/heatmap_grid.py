"""Small multiples of heatmaps (one panel per head, say): the builder, which checks the
panels once; :mod:`mechscope.report.render_heatmap_grid` draws them for both renderers.

Panels share their axes and one sequential colour scale, so equal colours mean equal values
in every panel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mechscope.errors import InputError
from mechscope.report.figure import Figure
from mechscope.report.specs import HeatmapGridSpec


def heatmaps(
    panels: Mapping[str, object],
    x_labels: Sequence,
    y_labels: Sequence,
    title: str,
    *,
    colorbar_title: str = "",
    x_title: str = "",
    y_title: str = "",
    zmin: float | None = None,
    zmax: float | None = None,
    caption: str | None = None,
) -> Figure:
    """One ``[rows, cols]`` heatmap per entry of ``panels`` (its title), row 0 at the top,
    NaN cells blank, on one colour scale from ``zmin`` to ``zmax`` (default: the values'
    range over every panel)."""
    if not panels:
        raise InputError("at least one panel", field="panels")
    checked = []
    for name, values in panels.items():
        arr = np.asarray(values, dtype=np.float64)  # [rows, cols]
        if arr.ndim != 2 or (checked and arr.shape != checked[0][1].shape):
            raise InputError(f"2-D panels of one shape, got {arr.shape}", field=f"panels[{name}]")
        checked.append((str(name), arr))
    rows, cols = checked[0][1].shape
    xs, ys = [str(v) for v in x_labels], [str(v) for v in y_labels]
    if len(xs) != cols or len(ys) != rows:
        raise InputError(f"{cols} x labels and {rows} y labels", field="labels")
    finite = np.concatenate([a[np.isfinite(a)] for _, a in checked])
    low = zmin if zmin is not None else float(finite.min()) if finite.size else 0.0
    high = zmax if zmax is not None else float(finite.max()) if finite.size else 1.0
    if caption is None:
        caption = (
            f"Each cell shows {colorbar_title or 'the value'} on one colour scale shared by "
            "the panels: brighter (yellow) is higher, darker (purple) lower. Hover a cell for "
            "its exact value."
        )
    spec = HeatmapGridSpec(
        checked, xs, ys, x_title, y_title, colorbar_title, float(low), float(max(high, low))
    )
    return Figure(spec, title, caption)
