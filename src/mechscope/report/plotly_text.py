"""Plain text and colours for plotly's labels: escaped, cut or wrapped.

Every string from the caller (tick labels, names, titles, hover texts) is plain text and is
escaped: tokens such as ``<s>`` or ``</b>`` must show as written, not as plotly markup. In
hover texts a newline starts a new line, and a line wider than
:data:`~mechscope.report.text_fit.HOVER_WIDTH` is wrapped (plotly wraps none, so a long
sentence would run across the page).
"""

from __future__ import annotations

import html
import math

from mechscope.report.text_fit import HOVER_WIDTH, cut, width, wrap

MAX_TICKS = 80
X_TITLE_CHARS = 44  # an x-axis title under a half-width plot beside long category labels
Y_TITLE_CHARS = 36  # about 280 px: a y-axis title line fits along a short plot
COLORBAR_TITLE_CHARS = 18  # a colour bar is narrow


def esc(text: str) -> str:
    """Escape plain text for plotly's pseudo-HTML labels."""
    return html.escape(str(text), quote=False)


def esc_hover(text: str) -> str:
    """Escape a hover text; its newlines and wrapped long lines become line breaks."""
    lines = []
    for line in str(text).split("\n"):  # a short line as written (a token's spaces count)
        lines += wrap(line, HOVER_WIDTH) if width(line) > HOVER_WIDTH else [line]
    return "<br>".join(esc(line) for line in lines)


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def axis_title(text: str, limit: int = X_TITLE_CHARS) -> str:
    """An escaped axis title broken into lines of at most ``limit`` columns: plotly
    never wraps one, and a long title would run past a half-width figure (a y title, along a
    plot a few hundred pixels tall, gets a smaller ``limit``)."""
    return "<br>".join(esc(line) for line in wrap(text, limit))


def ticks(labels: list[str]) -> dict:
    """Tick values at every index (thinned beyond ``MAX_TICKS``); labels cut and escaped
    (a heatmap's hover label names its row and column whole)."""
    step = max(1, math.ceil(len(labels) / MAX_TICKS))
    idx = list(range(0, len(labels), step))
    text = [esc(cut(labels[i])) for i in idx]
    return {"tickmode": "array", "tickvals": idx, "ticktext": text}


def category_ticks(categories: list[str]) -> dict:
    """Ticks of a category axis whose values are the escaped ``categories``: each label cut
    (hovering a point or bar shows the whole category)."""
    step = max(1, math.ceil(len(categories) / MAX_TICKS))
    shown = categories[::step]
    return {
        "tickmode": "array",
        "tickvals": [esc(c) for c in shown],
        "ticktext": [esc(cut(c)) for c in shown],
    }


def legend_name(name: str) -> str:
    """A legend entry: the name cut, escaped (the trace's hover label gives it whole)."""
    return esc(cut(name))
