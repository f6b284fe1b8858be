"""Plain text and colours for plotly's labels.

Every string from the caller (tick labels, names, titles, hover texts) is plain text and is
escaped: tokens such as ``<s>`` or ``</b>`` must show as written, not as plotly markup. In
hover texts a newline starts a new line.
"""

from __future__ import annotations

import html


def esc(text: str) -> str:
    """Escape plain text for plotly's pseudo-HTML labels."""
    return html.escape(str(text), quote=False)


def esc_hover(text: str) -> str:
    """Escape a hover text; its newlines become line breaks."""
    return esc(text).replace("\n", "<br>")


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
