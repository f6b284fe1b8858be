"""Lens figures name the two conditions wherever a label says A and B."""

from __future__ import annotations

import pandas as pd

from mechscope.lens.figures import label, metric_curves_figure, sample_heatmap


def test_labels_name_the_conditions():
    assert label("dnll", ("hint", "plain")) == "ΔNLL (hint − plain, nats)"
    assert label("kl_ba", ("hint", "plain")) == "KL(plain‖hint) (nats)"
    assert label("dnll") == "ΔNLL (A − B, nats)"


def test_figures_carry_the_names():
    tokens = pd.DataFrame(
        {
            "sample": "s",
            "metric": "dnll",
            "layer": [0, 0, 1, 1],
            "token": [0, 1, 0, 1],
            "token_text": ["a", "b", "a", "b"],
            "value": [0.1, -0.2, 0.3, 0.0],
        }
    )
    fig = sample_heatmap(tokens, "s", "dnll", "hint − plain", ("hint", "plain"))
    assert fig.title.startswith("ΔNLL (hint − plain, nats)")
    assert "condition hint predicts the token better than plain" in fig.caption
    curves = pd.DataFrame(
        {
            "metric": "dnll",
            "kind": "curve",
            "group": "all",
            "layer": [0, 1],
            "mean": [0.1, 0.2],
            "low": [0.0, 0.1],
            "high": [0.2, 0.3],
            "n": 3,
        }
    )
    fig = metric_curves_figure(curves, "dnll", names=("hint", "plain"))
    assert "hint − plain" in fig.title and "A − B" not in fig.title


def test_js_caption_compares_the_distributions_not_the_true_token():
    tokens = pd.DataFrame(
        {
            "sample": "s",
            "metric": "js",
            "layer": [0, 0, 1, 1],
            "token": [0, 1, 0, 1],
            "token_text": ["a", "b", "a", "b"],
            "value": [0.1, 0.2, 0.3, 0.0],
        }
    )
    fig = sample_heatmap(tokens, "s", "js", "hint − plain", ("hint", "plain"))
    assert "true next token" not in fig.caption
    assert "between the two conditions' next-token distributions" in fig.caption
    assert "whatever the true token" in fig.caption
