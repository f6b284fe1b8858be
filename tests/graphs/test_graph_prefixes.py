"""The feature rows through passes over prefixes of the prompt (``graphs.prefixes``).

The schedule takes every feature once, each through a prefix that holds its position, in
batches of at most the batch size, the whole prompt's pass last; a graph whose rows came
through several prefixes equals the one through the whole prompt's pass alone to rounding
(the same linear model, cut short), on a family with a sliding window and on a
cross-layer transcoder; and the cost model picks more passes only where they save work.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from transcoder_sets import cross_layer, transcoder_set

from mechscope.engine import Engine
from mechscope.graphs import attribute, prefixes
from mechscope.models import load_model
from tolerance import assert_exact, assert_rounding_close, depth_of

IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12, 33, 7, 19, 3])


def _active(n_layers: int, n_pos: int, n: int, seed: int = 0) -> torch.Tensor:
    """``[n, 3]`` distinct (layer, position, feature), sorted as the nodes are."""
    g = torch.Generator().manual_seed(seed)
    cells = torch.randperm(n_layers * n_pos * 50, generator=g)[:n]
    layer, rest = cells // (n_pos * 50), cells % (n_pos * 50)
    active = torch.stack([layer, rest // 50, rest % 50], 1)
    key = (active[:, 0] * n_pos + active[:, 1]) * 50 + active[:, 2]
    return active[key.argsort()]


@pytest.mark.parametrize(("n_pos", "n", "batch"), [(9, 1234, 32), (40, 300, 7), (3, 5, 64)])
def test_every_feature_once_inside_its_prefix(n_pos, n, batch) -> None:
    active = _active(18, n_pos, n)
    plan = prefixes.prefix_lengths(active, 18, n_pos, batch)
    assert plan[-1].tokens == n_pos and plan[-1].layers == 18, "the whole prompt's pass last"
    assert len(plan) <= prefixes.MAX_PASSES
    seen = torch.cat([b for p in plan for b in p.batches]).sort().values
    assert_exact(seen, torch.arange(n), msg="every feature exactly once")
    for p in plan:
        for b in p.batches:
            assert 0 < len(b) <= batch and bool((b.diff() > 0).all())
            assert int(active[b, 1].max()) < p.tokens, "a feature's position inside its prefix"
            assert int(active[b, 0].max()) < p.layers, "a feature's layer inside the pass"


def test_more_passes_only_where_they_save_work() -> None:
    active = _active(18, 9, 1234)
    assert len(prefixes.prefix_lengths(active, 18, 9, 32)) > 1  # the bench's shape
    few = _active(18, 9, 12)  # a dozen rows do not pay for a second pass
    assert len(prefixes.prefix_lengths(few, 18, 9, 32)) == 1


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory):
    eng = Engine.of(load_model("tiny:gemma3_text"))  # sliding-window layers beside global ones
    return eng, transcoder_set(eng.lm, tmp_path_factory.mktemp("tc"))


@pytest.fixture(scope="module")
def llama_clt():
    eng = Engine.of(load_model("tiny:llama"))
    return eng, cross_layer(eng.lm)


@pytest.mark.parametrize("which", ["gemma", "llama_clt"])
def test_rows_through_prefixes_equal_the_whole_pass(which, request, monkeypatch) -> None:
    eng, tset = request.getfixturevalue(which)
    whole = attribute(eng, tset, IDS, max_n_logits=3, batch_size=8)
    plans = []
    monkeypatch.setattr(prefixes, "FORWARD_FIXED", 0)  # passes free: as many as allowed
    monkeypatch.setattr(prefixes, "FORWARD_PER_TOKEN", 0)
    real = prefixes.prefix_lengths

    def spy(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    module = importlib.import_module("mechscope.graphs.attribute")
    monkeypatch.setattr(module, "prefix_lengths", spy)
    cut = attribute(eng, tset, IDS, max_n_logits=3, batch_size=8)
    assert len(plans[0]) > 2, [p.tokens for p in plans[0]]
    assert_exact(cut.active, whole.active)
    assert_rounding_close(cut.adjacency(), whole.adjacency(), depth=depth_of(eng.lm))
    a, b = cut.prune(), whole.prune()
    assert_exact(a.node_mask, b.node_mask)
