"""Attention patterns drawn (``Cache.pattern_figure``): the cells are the cache's pattern,
bit for bit, over the row's real tokens, with the keys a causal model cannot see left blank;
the tokens label both axes, cut by the report's one rule; several heads are small multiples
on one colour scale; every renderer draws them. The figures on smollm2 are kept in
``test-artifacts/attention-patterns/``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.report.heatmap_grid import heatmaps
from mechscope.report.specs import HeatmapGridSpec, HeatmapSpec
from mechscope.report.text_fit import LABEL_WIDTH, width

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "attention-patterns"
CLEAN = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def tiny():
    from mechscope import load_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny:llama")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cache(tiny):
    return tiny.run_with_cache([CLEAN, "Once upon a time"], ["pattern"])  # row 1 left-padded


def _decoded(lm, ids) -> list[str]:
    return [lm.tokenizer.decode([i]) for i in ids]


def test_one_head_is_the_caches_pattern_over_the_real_tokens(tiny, cache):
    fig = cache.pattern_figure(1, 2, row=1)
    assert isinstance(fig.spec, HeatmapSpec)
    real = cache.tokens.attention_mask[1].bool()
    want = cache["pattern", 1][1, 2][real][:, real].double().numpy()  # [q, k]
    n = want.shape[0]
    want[np.triu_indices(n, 1)] = np.nan  # keys after the query: blank, not zero
    np.testing.assert_array_equal(fig.spec.z, want)  # the same numbers, NaN where blank
    texts = _decoded(tiny, cache.tokens.ids[1][real].tolist())
    labels = [f"{i}:{t}" for i, t in enumerate(texts)]
    assert fig.spec.x_labels == labels and fig.spec.y_labels == labels
    assert "layer 1 head 2" in fig.title


def test_kept_positions_are_the_queries(tiny):
    cache = tiny.run_with_cache(CLEAN, ["pattern"], positions=[-1])
    fig = cache.pattern_figure(-1, 0)
    assert fig.spec.z.shape == (1, cache.tokens.ids.shape[1])
    assert fig.spec.y_labels == [fig.spec.x_labels[-1]]  # the last token attends to all
    assert not np.isnan(fig.spec.z).any()


def test_several_heads_are_small_multiples_on_one_scale(tiny, cache):
    fig = cache.pattern_figure(1)  # every head
    assert isinstance(fig.spec, HeatmapGridSpec)
    assert [t for t, _ in fig.spec.panels] == [f"L1 H{h}" for h in range(tiny.n_heads)]
    top = max(float(np.nanmax(z)) for _, z in fig.spec.panels)
    assert fig.spec.zmin == 0.0 and fig.spec.zmax == top
    for head, (_, z) in zip([0, 3], [fig.spec.panels[0], fig.spec.panels[3]], strict=True):
        np.testing.assert_array_equal(z, cache.pattern_figure(1, head).spec.z)
    assert len(cache.pattern_figure(1, [3, 1]).spec.panels) == 2


def test_refusals_name_what_to_do(tiny, cache):
    with pytest.raises(KeyError, match=r"run_with_cache\(prompts, \['pattern'\]\)"):
        tiny.run_with_cache(CLEAN, ["z"]).pattern_figure(1, 0)
    with pytest.raises(InputError, match=r"heads among 0\.\.3"):
        cache.pattern_figure(1, 7)
    with pytest.raises(InputError, match=r"row among 0\.\.1"):
        cache.pattern_figure(1, 0, row=2)


def test_long_tokens_are_cut_on_the_axes_and_whole_on_hover(tmp_path):
    tokens = ["0:" + "x" * 60, "1:短い日本語のトークンがとても長い文字列になる", "2: b"]
    z = np.tril(np.full((3, 3), 1 / 3))
    fig = heatmaps({"H0": z, "H1": z}, tokens, tokens, "long tokens", colorbar_title="attention")
    plot = fig.to_plotly()
    shown = list(plot.layout.xaxis.ticktext)
    assert all(width(t) <= LABEL_WIDTH for t in shown) and shown[2] == "2: b"
    assert "x" * 60 in plot.data[0].text[0][0]  # the whole token in the cell's hover label
    assert "<div" in fig._repr_html_()  # a notebook shows the figure
    paths = fig.save_static(tmp_path, "grid")
    assert [p.suffix for p in paths] == [".png", ".svg", ".pdf"]


@pytest.mark.slow
def test_smollm2_patterns_drawn(smollm2):
    """On the IOI prompt, head 24.4 reads the indirect object from the last token (0.81 of
    its attention on " Mary"); its pattern and its layer's heads are kept as figures."""
    cache = smollm2.run_with_cache(CLEAN, ["pattern"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    one = cache.pattern_figure(24, 4)
    grid = cache.pattern_figure(24)
    assert len(grid.spec.panels) == smollm2.n_heads
    for fig, stem in ((one, "smollm2-L24H4"), (grid, "smollm2-L24")):
        paths = fig.save_static(ARTIFACTS, stem)
        assert all(p.stat().st_size > 0 for p in paths)
    last = one.spec.z[-1]  # the last token's row
    assert one.spec.x_labels[int(np.nanargmax(last))] == "1: Mary"
