"""One style for every figure, in the report and on paper: colours, colour maps, fonts.

Both renderers read this module only, so a series has the same colour in the interactive
report and in the PNG, SVG and PDF copies, and changing the house style is one edit.

- Series colours are Okabe and Ito's palette, distinguishable under the common colour-vision
  deficiencies and in greyscale print by lightness; its yellow is left out (unreadable as a
  line on white).
- Diverging maps are ColorBrewer's RdBu (red above the centre, blue below), sequential maps
  viridis: both are colour-blind safe and print in greyscale.
- Static files embed their fonts: PDF as TrueType (``pdf.fonttype`` 42, not Type 3), SVG
  as paths, so a figure looks the same on any machine and journals accept it.
"""

from __future__ import annotations

#: Okabe & Ito (2008), in the order series take them: blue, orange, bluish green,
#: vermillion, reddish purple, sky blue, black, grey.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#999999",
)
POSITIVE_COLOR = "#0072B2"  #: positive edge weights (blue)
NEGATIVE_COLOR = "#D55E00"  #: negative edge weights (vermillion)
MUTED_COLOR = "#888888"  #: reference lines (y = 0, y = x)
MARK_COLOR = "#000000"  #: marks on heatmap cells whose interval excludes the centre
DIVERGING_MPL = "RdBu_r"
DIVERGING_PLOTLY = "RdBu_r"
SEQUENTIAL_MPL = "viridis"
SEQUENTIAL_PLOTLY = "Viridis"
BAND_ALPHA = 0.18  #: confidence bands

FONT_STACK = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
FONT_SIZE_PX = 13  #: report figures
FONT_SIZE_PT = 9  #: static figures

#: matplotlib settings of every static figure (applied with ``rc_context``, never globally).
MPL_RC = {
    "text.parse_math": False,  # a token like ``$x`` is a label, not LaTeX
    "svg.hashsalt": "mechscope",  # reproducible SVG ids
    "svg.fonttype": "path",  # glyphs as paths: the SVG needs no font installed
    "pdf.fonttype": 42,  # TrueType embedded, not Type 3 bitmaps
    "ps.fonttype": 42,
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same glyphs everywhere
    "font.size": FONT_SIZE_PT,
    "axes.titlesize": FONT_SIZE_PT + 1,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # set below from PALETTE
    "legend.frameon": False,
    "legend.fontsize": FONT_SIZE_PT - 1,
    "image.cmap": SEQUENTIAL_MPL,
}


def color_for(index: int) -> str:
    """The palette colour of the ``index``-th series (cycling)."""
    return PALETTE[index % len(PALETTE)]


def mpl_rc() -> dict:
    """:data:`MPL_RC` with the palette as the colour cycle."""
    from cycler import cycler

    return MPL_RC | {"axes.prop_cycle": cycler(color=list(PALETTE))}


def plotly_template():
    """The plotly template of every report figure (fonts, palette, axes)."""
    import plotly.graph_objects as go

    axis = {"gridcolor": "#ececec", "zerolinecolor": "#c8c8c8", "linecolor": "#9a9a9a"}
    axis |= {"automargin": True, "showline": True, "title": {"font": {"size": FONT_SIZE_PX}}}
    return go.layout.Template(
        layout={
            "font": {"family": FONT_STACK, "size": FONT_SIZE_PX, "color": "#222"},
            "paper_bgcolor": "white",
            "plot_bgcolor": "white",
            "colorway": list(PALETTE),
            "hovermode": "closest",
            "hoverlabel": {"namelength": -1},  # a trace's name whole (legend entries are cut)
            "xaxis": axis | {"zeroline": False},  # layers, positions: 0 is not a reference
            "yaxis": axis,
            "margin": {"l": 60, "r": 20, "t": 56, "b": 50},
        }
    )
