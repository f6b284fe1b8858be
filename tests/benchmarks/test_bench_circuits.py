"""bench_circuits' mapping of CircuitKit's edge scores onto mechscope's, without CircuitKit:
its layout is rebuilt here from its rules (ungrouped key/value receivers, the negated batch
mean), and the EAP-IG shift is checked on a real tiny model."""

from __future__ import annotations

import bench_circuits
import harness
import pytest
import torch

from mechscope.circuits import Wiring, attribute
from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.graph import EdgeGraph
from mechscope.engine import Engine
from mechscope.models import load_model
from mechscope.tolerance import rounding_tolerance
from tolerance import assert_exact, assert_rounding_close, depth_of


def circuitkit_layout(g: EdgeGraph, ours: torch.Tensor, batch: int) -> tuple[torch.Tensor, dict]:
    """``ours`` written the way CircuitKit holds it: ``[forward, backward]`` by its node
    order, every query head with its own key/value receiver (a key-value head's score
    split evenly over its group), divided by ``−batch``."""
    group = g.n_heads // g.n_kv_heads
    backward = []
    for layer in range(g.n_layers):
        for kind in "qkv":
            backward += [f"a{layer}.h{h}<{kind}>" for h in range(g.n_heads)]
        backward.append(f"m{layer}")
    backward.append("logits")
    col = {n: i for i, n in enumerate(g.receiver_names)}
    ck = torch.zeros(g.n_senders, len(backward))
    for j, name in enumerate(backward):
        node, _, kind = name.partition("<")
        if kind[:1] in ("k", "v"):
            layer, head = node.split(".h")
            kv = int(head) // group
            ck[:, j] = ours[:, col[f"{layer}.h{kv}<{kind}"]] / group
        else:
            ck[:, j] = ours[:, col[name]]
    ready = {"forward": g.sender_names, "backward": backward, "n_heads": g.n_heads}
    return ck / -batch, ready


@pytest.mark.parametrize("kv", [4, 2])
def test_circuitkit_scores_map_back_exactly(kv: int) -> None:
    """Group sizes and the batch are powers of two: the round trip is exact."""
    g = EdgeGraph(n_layers=2, n_heads=4, n_kv_heads=kv, d_model=8)
    ours = torch.randn(g.n_senders, g.n_receivers, generator=torch.Generator().manual_seed(0))
    ours = ours * g.real
    ck, ready = circuitkit_layout(g, ours, 8)
    assert_exact(bench_circuits.to_ours(g, ck, ready, 8), ours)


def test_check_fails_on_a_perturbed_or_flipped_score() -> None:
    g = EdgeGraph(n_layers=2, n_heads=4, n_kv_heads=2, d_model=8)
    ours = torch.randn(g.n_senders, g.n_receivers, generator=torch.Generator().manual_seed(1))
    ours = ours * g.real
    assert bench_circuits.check(ours, ours.clone(), g.n_layers).ok
    moved = ours.clone()
    tol = rounding_tolerance(float(ours.abs().max()), 2 * g.n_layers + 2)
    moved[0, 0] += 10 * tol
    assert not bench_circuits.check(ours, moved, g.n_layers).ok
    assert not bench_circuits.check(ours, -ours, g.n_layers).ok  # the metric's sign forgotten
    ck, ready = circuitkit_layout(g, ours, 8)
    unsummed = bench_circuits.to_ours(g, ck, {**ready, "n_heads": g.n_kv_heads}, 8)
    assert not bench_circuits.check(ours, unsummed, g.n_layers).ok  # one query head's copy


def test_ig_right_is_the_right_riemann_sum() -> None:
    """With one step, mechscope's left sum is ``f'(0)`` (the corrupt input's gradient) and
    the right sum ``f'(1)``: ``ig_right`` of the one-step scores is the EAP score."""
    lm = load_model("tiny:llama")
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(3, lm.vocab_size, (2, 6), generator=gen)  # [b, seq]
    corrupt = clean.clone()
    corrupt[:, 2] = torch.randint(3, lm.vocab_size, (2,), generator=gen)
    labels = torch.randint(3, lm.vocab_size, (2, 2), generator=gen)
    data = [EdgeBatch(clean, corrupt, torch.ones_like(clean), labels, ("0", "1"))]
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    run = {
        m: attribute(eng, data, method=m, steps=1, wiring=wiring).scores
        for m in ("EAP", "clean-corrupted", "EAP-IG-inputs")
    }
    got = bench_circuits.ig_right(run["EAP-IG-inputs"], run["EAP"], run["clean-corrupted"], 1)
    scale = max(float(run[m].abs().max()) for m in run)  # the terms of 2 (EAP − CC)
    assert_rounding_close(got, run["EAP"], depth=2 * depth_of(lm), scale=scale)
    assert harness.agreement(got, run["EAP"], depth=2 * depth_of(lm), scale=scale).ok
