"""Each benchmark's own check, run on a tiny model: it passes on the real computation and
fails when one side's result is perturbed (no peer venv needed)."""

from __future__ import annotations

import bench_cache
import bench_lens
import bench_logit_lens
import bench_path_patching
import bench_pattern
import harness
import numpy as np
import patching_contract
import pytest
import torch

from mechscope.engine import Engine
from mechscope.lens.readout import readout_layers
from mechscope.models import load_model
from mechscope.tolerance import rounding_tolerance
from tolerance import assert_fp64_close

TINY = "tiny:llama"


@pytest.fixture(scope="module")
def tiny():
    return load_model(TINY)


def _ids(lm, seq: int = 12) -> torch.Tensor:
    return torch.randint(0, lm.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))


def test_pattern_capture_check(tiny) -> None:
    ids = _ids(tiny)
    ours = bench_pattern.capture_ours(tiny, ids)
    peer = bench_pattern.capture_peer(bench_pattern.eager_copy(TINY), ids)
    scores = harness.score_scale_of(tiny, ids)
    assert bench_pattern.check(ours, peer, scores).ok
    patterns = [p.clone() for p in peer[1]]
    patterns[-1][0, 0, -1, 0] += 10 * rounding_tolerance(scores, tiny.n_layers + 1)
    assert not bench_pattern.check(ours, (peer[0], patterns), scores).ok
    assert not bench_pattern.check(ours, (peer[0] + 1e-2, peer[1]), scores).ok
    assert not bench_pattern.check(ours, (peer[0], peer[1][:-1]), scores).ok  # a layer missing


def test_cache_check(tiny) -> None:
    """bench_cache's agreement on every resid_post and z: a plain-hook peer (each layer's
    output and o_proj's input) passes; one value moved by 1e-3 of the magnitude fails."""
    ids = _ids(tiny)
    ours = bench_cache.ours_cache(tiny, ids)
    resid, z = [], []
    hooks = []
    for layer in range(tiny.n_layers):
        hooks.append(
            tiny.layer_module(layer).register_forward_hook(
                lambda m, a, out: resid.append(out[0] if isinstance(out, tuple) else out)
            )
        )
        hooks.append(
            tiny.layer_part("o_proj", layer).register_forward_pre_hook(
                lambda m, a: z.append(a[0].unflatten(-1, (tiny.n_heads, -1)))
            )
        )
    try:
        with torch.no_grad():
            logits = tiny.model(input_ids=ids).logits
    finally:
        for h in hooks:
            h.remove()
    peer = {"resid_post": torch.stack(resid), "z": torch.stack(z), "logits": logits}
    assert bench_cache._check(ours, peer).ok
    peer["z"][0, 0, 0, 0, 0] += 1e-3 * float(peer["z"].abs().max())
    assert not bench_cache._check(ours, peer).ok


def test_logit_lens_check(tiny) -> None:
    ids = _ids(tiny)
    ours = bench_logit_lens.lens_ours(tiny, ids)
    ref = bench_logit_lens.lens_reference(tiny.model, ids)
    assert ours.shape == (tiny.n_layers + 1, ids.shape[1] - 1)
    assert bench_logit_lens.check(tiny, ids, ours, ref).ok
    bad = ref.clone()
    tol = rounding_tolerance(bench_logit_lens.nll_scale(tiny, ids), tiny.n_layers + 1)
    bad[0, 3] += 3 * tol
    assert not bench_logit_lens.check(tiny, ids, ours, bad).ok


def test_paired_lens_check(tiny) -> None:
    eng = Engine.of(tiny)
    gen = torch.Generator().manual_seed(1)
    n = 60  # the check reads 48 tokens spread over the continuation
    hidden = torch.randn(tiny.n_layers, 2, n, tiny.d_model, generator=gen)  # [L, 2, T, d]
    targets = torch.randint(0, tiny.vocab_size, (n,), generator=gen)
    stats = readout_layers(eng, (hidden[:, 0], hidden[:, 1]), targets, chunk=7, workers=1)
    metrics = torch.cat([stats[:2], stats[:1] - stats[1:2], stats[2:]]).numpy()  # [6, L, T]
    assert bench_lens.check_agreement(eng, hidden, targets, metrics)[0]
    bad = metrics.copy()
    bad[3, tiny.n_layers - 1, n - 1] += 1e-2  # JS of the last token, last layer
    assert not bench_lens.check_agreement(eng, hidden, targets, bad)[0]
    bad = metrics.copy()
    bad[0, 0, 0] += 1e-2  # NLL under A of the first token, first layer
    assert not bench_lens.check_agreement(eng, hidden, targets, bad)[0]


def test_patching_rows_fail_on_a_perturbed_grid() -> None:
    grid = np.random.default_rng(2).normal(size=(4, 3, 7))
    names = ("mechscope", "mechscope_noskip", "transformer_lens", "nnsight")
    wall = {n: [1.0, 1.1] for n in names}
    grids = {n: grid.copy() for n in names}
    close = dict(logit_scale=3.0, depth=4)  # logits up to 3 (the grid's 3σ), 3 layers
    rows = patching_contract.cases(wall, wall, grids, "tiny", skipped={}, **close)
    assert len(rows) == 4 and all(r.agree for r in rows)
    grids["nnsight"][1, 2, 3] += 10 * rounding_tolerance(2 * 3.0, 4)
    skipped = {"transformer_lens": "x"}
    rows = patching_contract.cases(wall, wall, grids, "tiny", skipped=skipped, **close)
    assert rows[0].unavailable == "x"
    assert [r.agree for r in rows[1:]] == [False, False]


def test_executor_check_fails_on_a_perturbed_table(tmp_path) -> None:
    import bench_executor
    import pandas as pd

    for run in ("a", "b"):
        (tmp_path / run / "tables").mkdir(parents=True)
        frame = pd.DataFrame({"sample": ["s0", "s1"], "ig": [0.25, -1.5], "seconds": [1.0, 2.0]})
        if run == "b":
            frame["seconds"] = [9.0, 9.0]  # a sample's wall time is not compared
        frame.to_parquet(tmp_path / run / "tables" / "heads_attributions.parquet")
    depth = 2 * 31  # forward and backward through 30 layers and the head
    assert bench_executor.same_tables(tmp_path / "a", tmp_path / "b", depth).ok
    frame["ig"] = [0.25, -1.5 + 1e-3]
    frame.to_parquet(tmp_path / "b" / "tables" / "heads_attributions.parquet")
    check = bench_executor.same_tables(tmp_path / "a", tmp_path / "b", depth)
    assert not check.ok  # 1e-3 added to -1.5 and taken off again: rounded at 1.5
    assert_fp64_close(check.max_abs, 1e-3, terms=2, scale=1.5, msg="max |diff|")
    frame["ig"] = [0.25, -1.5 + 1e-9]  # within fp32 rounding at 1.5 over 62 stages
    frame.to_parquet(tmp_path / "b" / "tables" / "heads_attributions.parquet")
    assert bench_executor.same_tables(tmp_path / "a", tmp_path / "b", depth).ok


def test_path_patching_check_fails_on_a_perturbed_grid(tiny) -> None:
    from mechscope.data.pairs import ContrastivePair

    text = "When Mary and John went to the store, {} gave a drink to"
    clean, corrupt = text.format("John"), text.format("Mary")
    pair = ContrastivePair("p", "test", clean, corrupt, " Mary", " John", {}, {})
    heads = [(layer, h) for layer in range(tiny.n_layers) for h in range(tiny.n_heads)]
    grid = bench_path_patching.run_mechscope(tiny, [pair], heads, heads, "q")
    ids = torch.tensor([tiny.tokenizer(pair.clean)["input_ids"]])
    atol = bench_path_patching.tolerance(tiny, ids)
    assert bench_path_patching.check(grid, grid.copy(), atol).ok
    moved = grid.copy()
    moved[0, 0, -1] += 10 * atol
    assert not bench_path_patching.check(grid, moved, atol).ok
    holes = grid.copy()
    holes[0, -1, -1] = 0.0  # a cell without a path (sender in the last layer) filled in
    assert not bench_path_patching.check(grid, holes, atol).ok


def test_features_checks(tiny, tmp_path) -> None:
    """bench_features' agreement: feature activations of two sites against the dictionary
    applied by hand to transformers' hidden states (the last one is after the final norm,
    so not the last layer) pass, one moved by 1e-3 of the largest
    fails; training agrees when both held-out FVUs fell in training, not otherwise."""
    import bench_features

    ids = _ids(tiny)
    ids[:, 0] = tiny.tokenizer.bos_token_id
    layers = tuple(range(tiny.n_layers - 1))
    dicts, _ = bench_features.cache_dictionaries(tiny, ids, tmp_path, layers)
    ours = [t.to_dense() for t in bench_features.cache_ours(tiny, ids, dicts)[0]]
    with torch.no_grad():
        hidden = tiny.model(input_ids=ids, output_hidden_states=True).hidden_states
        x = [hidden[layer + 1] for layer in layers]
        peer = [d.encode(h) for d, h in zip(dicts, x, strict=True)]
    assert any(bool((p != 0).any()) for p in peer)
    assert bench_features.feature_agreement(ours, peer, x, dicts, layers, tiny).ok
    alone = [t.to_dense() for t in bench_features.cache_ours(tiny, ids, dicts, False)[0]]
    assert bench_features.feature_agreement(alone, peer, x, dicts, layers, tiny).ok
    peer[-1][0, -1, 0] += 1e-3 * float(peer[-1].abs().max())
    assert not bench_features.feature_agreement(ours, peer, x, dicts, layers, tiny).ok
    ours, peer = {"fvu_init": 1.2, "fvu": 0.5}, {"fvu_init": 9.0, "fvu": 1.5}
    assert bench_features.training_agreement(ours, peer).ok
    assert not bench_features.training_agreement(ours, {"fvu_init": 1.2, "fvu": 1.3}).ok
    assert not bench_features.training_agreement({"fvu_init": 0.9, "fvu": 0.9}, peer).ok


def test_attribution_floor_runs_and_restores_parameters(tiny) -> None:
    """bench_attribution's floor (plain forward + backward rows, parameters frozen) runs on
    the model's own modules and leaves every parameter's ``requires_grad`` as it found it:
    the floor once passed the loaded model where the modules were wanted, and the script
    stopped before timing anything."""
    import bench_attribution

    from mechscope.heads import GateFunction, nll_objective

    obj = nll_objective(tiny.tokenizer, "one two three four", " five", sample_id="floor")
    f = GateFunction(tiny, obj)
    params = list(tiny.model.parameters())
    before = [p.requires_grad for p in params]
    params[0].requires_grad_(not before[0])  # a mixed state must come back as it was
    try:
        flags = [p.requires_grad for p in params]
        bench_attribution.floor_fn(f, rows=3, batch=2)()
        assert [p.requires_grad for p in params] == flags
    finally:  # the module's shared model as the other tests expect it
        params[0].requires_grad_(before[0])


def test_anchors_check_runs_on_both_sides_results(tiny) -> None:
    """bench_anchors' comparison takes the matrices as both sides return them (ours a
    tensor): the script once stopped there after timing, with no row written. It agrees on
    the real computation and fails when one cell moves."""
    import bench_anchors

    from mechscope.anchors.attention.trace_tokens import tokenize_trace

    tokens = tokenize_trace(tiny.tokenizer, bench_anchors.forty_sentence_trace(4))
    eng = Engine.of(tiny)
    ours = bench_anchors.run_mechscope(eng, tokens, None)[2]
    loop, kl, top = bench_anchors.run_loop(tiny, tokens)[2:]
    agree, ok, r = bench_anchors.compare(tiny, tokens, ours, loop, kl, top)
    assert agree.ok and ok.any() and r > 0.99
    moved = torch.as_tensor(ours).double().clone()
    i, j = np.argwhere(ok)[0]
    moved[i, j] += 1.0
    assert not bench_anchors.compare(tiny, tokens, moved, loop, kl, top)[0].ok
