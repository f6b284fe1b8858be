"""Feature dashboards as one searchable HTML block of the report: a search box that filters
the features by any word of their top contexts or logits, and per feature its frequency,
activation histogram, top and bottom logits and contexts with each token shaded by the
feature's activation. Plain HTML and a few lines of script: no library, no network."""

from __future__ import annotations

from typing import Any

from markupsafe import escape

SCRIPT = """<script>
(function () {
  const box = document.currentScript.previousElementSibling.querySelector("input");
  const cards = box.closest(".features-dashboard").querySelectorAll("details.feature");
  box.addEventListener("input", () => {
    const q = box.value.toLowerCase();
    cards.forEach((c) => { c.style.display = c.dataset.text.includes(q) ? "" : "none"; });
  });
})();
</script>"""


def _tokens(tokens: list[str], values: list[float], peak: float) -> str:
    out = []
    for tok, v in zip(tokens, values, strict=True):
        alpha = 0.0 if peak <= 0 else min(1.0, max(0.0, v / peak))
        style = f"background: rgba(230, 159, 0, {alpha:.2f})" if v > 0 else ""
        text = escape(tok.replace("\n", "↵").replace("\r", "↵"))
        out.append(f'<span class="tok" style="{style}" title="{v:.3g}">{text}</span>')
    return "".join(out)


def _one_line(text: str) -> str:
    """A token as it prints in a list: escaped, line breaks shown as ↵, quoted."""
    return "'" + str(escape(text.replace("\n", "↵").replace("\r", "↵"))) + "'"


def _histogram(heights: list[int], width: int = 220, height: int = 40) -> str:
    if not heights or max(heights) == 0:
        return ""
    w = width / len(heights)
    top = max(heights)
    bars = "".join(
        f'<rect x="{i * w:.1f}" y="{height - h / top * height:.1f}" width="{w * 0.9:.1f}" '
        f'height="{h / top * height:.1f}" fill="#0072B2"/>'
        for i, h in enumerate(heights)
    )
    return f'<svg width="{width}" height="{height}" role="img">{bars}</svg>'


def feature_card(name: str, f: dict[str, Any]) -> str:
    """One feature's dashboard."""
    tops = [a for a in f["activations"] if a["bin_min"] == -1]
    bands = [a for a in f["activations"] if a["bin_min"] != -1]
    peak = max((max(a["values"]) for a in tops), default=0.0)
    logits = ", ".join(
        f"{_one_line(s)} ({v:+.2f})" for s, v in zip(f["pos_str"], f["pos_values"], strict=True)
    )
    negative = ", ".join(
        f"{_one_line(s)} ({v:+.2f})" for s, v in zip(f["neg_str"], f["neg_values"], strict=True)
    )
    rows = "".join(f"<li>{_tokens(a['tokens'], a['values'], peak)}</li>" for a in tops)
    band_rows = "".join(
        f"<li><span class='band'>({a['bin_min']:.2g}, {a['bin_max']:.2g}]</span> "
        f"{_tokens(a['tokens'], a['values'], peak)}</li>"
        for a in bands
    )
    words = " ".join("".join(a["tokens"]) for a in tops) + " " + " ".join(f["pos_str"])
    # one line: a blank line would end the report's HTML block inside the attribute
    search = escape(" ".join(f"{name} {f['feature_index']} {words}".lower().split()))
    return (
        f'<details class="feature" data-text="{search}"><summary><b>{escape(name)} · feature '
        f"{f['feature_index']}</b> · fires on {100 * f['frac_nonzero']:.3g}% of tokens · max "
        f"{peak:.3g}</summary>"
        f"<p>activations (non-zero): {_histogram(f.get('freq_hist_data_bar_heights', []))}</p>"
        f"<p><b>promotes</b> {logits}<br><b>suppresses</b> {negative}</p>"
        f"<p><b>top contexts</b></p><ol class='contexts'>{rows}</ol>"
        f"<details><summary>contexts by activation band</summary><ul>{band_rows}</ul></details>"
        "</details>"
    )


def dashboard_html(batches: dict[str, dict[str, Any]]) -> str:
    """Every explained feature of every dictionary, behind one search box."""
    cards = "".join(feature_card(n, f) for n, b in batches.items() for f in b["features"])
    style = (
        "<style>.features-dashboard .tok{white-space:pre;font-family:monospace}"
        ".features-dashboard .band{color:#666;font-size:90%}"
        ".features-dashboard details.feature{margin:4px 0}</style>"
    )
    box = (
        '<p><input type="search" placeholder="search features: a word of their contexts or '
        'logits, a dictionary, an index" style="width:60%"></p>'
    )
    html = f'<div class="features-dashboard">{style}<div>{box}</div>{SCRIPT}{cards}</div>'
    return html.replace("\n\n", "\n")
