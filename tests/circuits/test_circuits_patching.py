"""Exact edge patching on five families: the whole graph is the clean run bit for bit, the
empty circuit the corrupt run up to rounding, and what the senders write adds up to the
residual stream the logits read."""

from __future__ import annotations

import pytest
import torch

from mechscope.circuits.edge_pass import EdgePass, Wiring
from mechscope.circuits.evaluate import baselines, evaluate, patched_logits, prepare
from mechscope.engine import Engine, Read, Site
from mechscope.models import load_model
from mechscope.tolerance import scale_of
from tolerance import assert_beyond_rounding, assert_exact, assert_rounding_close, depth_of

FAMILIES = ["tiny:llama", "tiny:gpt2", "tiny:qwen3", "tiny:gemma3_text", "tiny:gpt_neox"]


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request, batch):
    lm = load_model(request.param)
    eng = Engine.of(lm)
    wiring = Wiring.of(lm)
    return lm, eng, wiring, prepare(eng, wiring, [batch])[0]


def test_whole_graph_is_the_clean_run(setup, batch):
    _, eng, wiring, prep = setup
    # a read after the last MLP keeps it on every position, as in the recording pass (alone,
    # logits=1 runs it at the readout only: the same numbers up to rounding, not bit for bit)
    last = Read(Site("resid_post", eng.lm.n_layers - 1))
    plain = eng.run(batch.clean, [last], attention_mask=batch.mask, logits=1).logits[:, -1].float()
    assert_exact(prep.clean_logits, plain, msg="recording pass")
    none = torch.zeros(wiring.graph.n_senders, wiring.graph.n_receivers)
    assert_exact(patched_logits(eng, wiring, prep, none), plain, msg="no edge patched")


def test_empty_circuit_is_the_corrupt_run(setup, batch):
    lm, eng, wiring, prep = setup
    plain = eng.run(batch.corrupt, [], attention_mask=batch.mask, logits=1).logits[:, -1].float()
    every = wiring.graph.real.float()
    got = patched_logits(eng, wiring, prep, every)
    scale = scale_of(prep.clean_logits, plain)
    assert_beyond_rounding(prep.clean_logits, plain, depth=depth_of(lm), scale=scale, msg="pair")
    assert_rounding_close(got, plain, depth=depth_of(lm), scale=scale, msg="every edge patched")
    # the same through evaluate(): the empty circuit scores the corrupt run's metric
    empty = torch.zeros_like(wiring.graph.real)
    clean, corrupt = baselines([prep])
    scale = scale_of(prep.clean_logits, prep.corrupt_logits)
    assert_rounding_close(
        evaluate(eng, wiring, [prep], empty), corrupt, depth=depth_of(lm), scale=scale, msg="metric"
    )
    assert_exact(evaluate(eng, wiring, [prep], wiring.graph.real), clean, msg="whole graph")


def test_logits_read_only_their_own_edges(setup, batch):
    """Patching every edge into the logits (and nothing else) gives the corrupt logits: the
    logits read nothing but the last residual stream."""
    lm, eng, wiring, prep = setup
    mask = torch.zeros(wiring.graph.n_senders, wiring.graph.n_receivers)
    mask[:, wiring.graph.logits_receiver] = 1
    got = patched_logits(eng, wiring, prep, mask)
    scale = scale_of(prep.clean_logits, prep.corrupt_logits)
    assert_rounding_close(got, prep.corrupt_logits, depth=depth_of(lm), scale=scale, msg="logits")


def test_senders_add_up_to_the_residual(setup, batch):
    """Input + every head's write + every MLP = the last residual stream, up to the
    attention projections' biases (GPT-2, NeoX), which no sender owns."""
    lm, eng, wiring, _ = setup
    p = EdgePass(wiring)
    site = Site("resid_post", lm.n_layers - 1)
    out = eng.run(batch.clean, [*p.edits(), Read(site)], attention_mask=batch.mask, logits=False)
    total = torch.cat(p.outputs, 2).sum(2)  # [b, p, d]
    bias = torch.zeros(lm.d_model)
    for layer in range(lm.n_layers):
        b = getattr(lm.layer_part("o_proj", layer), "bias", None)
        if b is not None:
            bias = bias + b.detach().float()
    resid = out[site].float()
    assert_rounding_close(total + bias, resid, depth=depth_of(lm, lm.n_layers - 1), msg="sum")
