"""Each benchmark's own check, run on a tiny model: it passes on the real computation and
fails when one side's result is perturbed (no peer venv needed)."""

from __future__ import annotations

import bench_lens
import bench_logit_lens
import bench_pattern
import numpy as np
import patching_contract
import pytest
import torch

from mechscope.engine import Engine
from mechscope.lens import paired_layer_readout
from mechscope.models import load_model

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
    assert bench_pattern.check(ours, peer).ok
    patterns = [p.clone() for p in peer[1]]
    patterns[-1][0, 0, -1, 0] += 10 * bench_pattern.PATTERN_ATOL
    assert not bench_pattern.check(ours, (peer[0], patterns)).ok
    assert not bench_pattern.check(ours, (peer[0] + 1e-2, peer[1])).ok
    assert not bench_pattern.check(ours, (peer[0], peer[1][:-1])).ok  # a layer missing


def test_logit_lens_check(tiny) -> None:
    ids = _ids(tiny)
    ours = bench_logit_lens.lens_ours(tiny, ids)
    ref = bench_logit_lens.lens_reference(tiny.model, ids)
    assert ours.shape == (tiny.n_layers + 1, ids.shape[1] - 1)
    atol = bench_logit_lens.NLL_ATOL
    assert bench_logit_lens.harness.agreement(ours, ref, atol=atol).ok
    bad = ref.clone()
    bad[0, 3] += 3 * atol
    assert not bench_logit_lens.harness.agreement(ours, bad, atol=atol).ok


def test_paired_lens_check(tiny) -> None:
    eng = Engine.of(tiny)
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(tiny.n_layers, 2, 20, tiny.d_model, generator=gen)  # [L, 2, T, d]
    targets = torch.randint(0, tiny.vocab_size, (20,), generator=gen)
    stats = torch.stack(
        [
            paired_layer_readout(eng, hidden[layer], targets, chunk=7, sub=3)
            for layer in range(tiny.n_layers)
        ],
        dim=1,
    )  # [5, L, T]
    metrics = torch.cat([stats[:2], stats[:1] - stats[1:2], stats[2:]]).numpy()  # [6, L, T]
    layers = sorted({0, tiny.n_layers - 1})
    reference = bench_lens.dense_reference(eng, hidden, targets, layers, chunk=8)
    assert bench_lens.check_stats(metrics, reference, layers).ok
    bad = metrics.copy()
    bad[3, layers[-1], 5] += 10 * bench_lens.STATS_ATOL  # JS of one token
    assert not bench_lens.check_stats(bad, reference, layers).ok


def test_patching_rows_fail_on_a_perturbed_grid() -> None:
    grid = np.random.default_rng(2).normal(size=(4, 3, 7))
    names = ("mechscope", "mechscope_noskip", "transformer_lens", "nnsight")
    wall = {n: [1.0, 1.1] for n in names}
    grids = {n: grid.copy() for n in names}
    rows = patching_contract.cases(wall, wall, grids, "tiny", skipped={})
    assert len(rows) == 4 and all(r.agree for r in rows)
    grids["nnsight"][1, 2, 3] += 10 * patching_contract.GRID_ATOL
    rows = patching_contract.cases(wall, wall, grids, "tiny", skipped={"transformer_lens": "x"})
    assert rows[0].unavailable == "x"
    assert [r.agree for r in rows[1:]] == [False, False]
