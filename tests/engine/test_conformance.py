"""Conformance of the engine against every model card (tiny models) and real models.

Each check compares the engine with an independent computation: transformers' own hidden
states, eager attention probabilities, a hand-built 4-D attention mask. Each comparison
allows what rounding alone explains at the values' scale and depth (tests/tolerance.py), so
it holds under any CPU's summation order; test_tolerance_power.py shows that a wrong mask
position or a wrong head still fails it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from mechscope.engine import Ablate, Engine, Gate, Patch, Read, Site, SuppressAttention
from mechscope.engine.core import attention as attention_module
from mechscope.engine.core.spans import attention_span
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import all_cards, load_model
from tolerance import (
    assert_beyond_rounding,
    assert_rounding_close,
    depth_of,
    scale_of,
    score_scale,
)

FAMILIES = sorted(all_cards())


def _model(spec: str):
    lm = load_model(spec)
    return lm, Engine.of(lm)


def _ids(lm, seq: int = 12, batch: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, seq), generator=gen)


def _hidden_states(lm, ids):
    with torch.no_grad():
        return lm.model(input_ids=ids, output_hidden_states=True)


def _supported(lm, eng, name: str) -> bool:
    """Whether the engine serves ``name`` on this model (else it refuses it in one line)."""
    return name not in {**eng.refusals, **lm.refused}


SELF_PATCH_SITES = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "mlp_post",
    "z",
    "q",
    "k",
    "v",
    "attn_scores",
)


def check_reads(lm, eng, ids) -> None:
    ref = _hidden_states(lm, ids)
    L = lm.n_layers
    reads = [Read(Site("resid_pre", l)) for l in range(L)]
    reads += [Read(Site("resid_post", l)) for l in range(L - 1)]
    out = eng.run(ids, reads)
    for l in range(L):
        got, want = out[Site("resid_pre", l)], ref.hidden_states[l]
        assert_rounding_close(got, want, depth=depth_of(lm, l), msg=f"resid_pre {l}")
    for l in range(L - 1):
        got, want = out[Site("resid_post", l)], ref.hidden_states[l + 1]
        assert_rounding_close(got, want, depth=depth_of(lm, l + 1), msg=f"resid_post {l}")
    assert_rounding_close(out.logits, ref.logits, depth=depth_of(lm), msg="logits")
    if _supported(lm, eng, "resid_mid"):  # resid_mid = resid_pre + attn_out: one add
        names = ("resid_pre", "attn_out", "resid_mid")
        mid = eng.run(ids, [Read(Site(n, 1)) for n in names], logits=False)
        pre, attn, got = (mid[Site(n, 1)] for n in names)
        scale = scale_of(pre, attn, got)
        assert_rounding_close(got, pre + attn, depth=1, scale=scale, msg="resid_mid")


def check_self_patch(lm, eng, ids) -> None:
    for name in SELF_PATCH_SITES:
        if not _supported(lm, eng, name):
            with pytest.raises(UnsupportedInterventionError):
                eng.run(ids, [Read(Site(name, 0))])
            continue
        layer = lm.n_layers // 2
        site = Site(name, layer)
        # an edit of attn_scores takes the explicit fp32 path, which differs from SDPA by
        # rounding (~1e-6 relative on a real model), while a read leaves the layer on SDPA:
        # its base is the explicit path unedited (suppressing an empty span forces it)
        read = eng.run(ids, [Read(site)])
        value, base = read[site], read.logits
        if name == "attn_scores":
            base = eng.run(ids, [SuppressAttention((0, 0), layers=[layer])]).logits
        patched = eng.run(ids, [Patch(site, value)]).logits
        depth = depth_of(lm)
        assert_rounding_close(patched, base, depth=depth, msg=f"self-patch {name}")
        # a real patch must change something (the check above is not vacuous); q and k
        # move the logits little on random weights, so their noise is larger
        noise = torch.randn(value.shape, generator=torch.Generator().manual_seed(1))
        noise = noise * (10.0 if name in ("q", "k", "attn_scores") else 1.0)
        changed = eng.run(ids, [Patch(site, value + noise)]).logits
        assert_beyond_rounding(changed, base, depth=depth, scale=scale_of(base), msg=name)


def check_gates(lm, eng, ids) -> None:
    base = eng.run(ids).logits
    depth = depth_of(lm)
    ones = torch.ones(lm.n_layers, lm.n_heads)
    assert_rounding_close(eng.run(ids, [Gate(ones)]).logits, base, depth=depth, msg="gate 1")
    layer = 1
    alpha = ones.clone()
    alpha[layer] = 0
    gated = eng.run(ids, [Gate(alpha)]).logits
    zeroed = eng.run(ids, [Ablate(Site("z", layer), "zero")]).logits
    assert_rounding_close(gated, zeroed, depth=depth, msg="gate 0 vs zero ablation")
    assert_beyond_rounding(gated, base, depth=depth, scale=scale_of(base), msg="gate 0")
    head = lm.n_heads - 1  # one head: its gate and the ablation of its own slice of z
    alpha = ones.clone()
    alpha[layer, head] = 0
    gated = eng.run(ids, [Gate(alpha)]).logits
    zeroed = eng.run(ids, [Ablate(Site("z", layer, head=head), "zero")]).logits
    assert_rounding_close(gated, zeroed, depth=depth, msg=f"gate 0 on head {head}")
    assert_beyond_rounding(gated, base, depth=depth, scale=scale_of(base), msg="one head")


def check_pattern(lm, eng, ids) -> None:
    eager = copy.deepcopy(lm.model)
    eager.set_attn_implementation("eager")
    for module in eager.modules():  # an independent model: no engine attributes
        for attr in ("_mechscope_layer", "_mechscope_bidirectional"):
            if hasattr(module, attr):
                delattr(module, attr)
    if lm.card.bidirectional_override:
        pytest.skip("eager attention of the llama class is causal; covered by check_bidirectional")
    with torch.no_grad():
        ref = eager(input_ids=ids, output_attentions=True).attentions
    L = lm.n_layers
    out = eng.run(ids, [Read(Site(n, l)) for l in range(L) for n in ("pattern", "attn_scores")])
    for l in range(L):  # probabilities carry their scores' absolute error
        scale = score_scale(out[Site("attn_scores", l)])
        got, want = out[Site("pattern", l)], ref[l].float()
        assert_rounding_close(got, want, depth=depth_of(lm, l), scale=scale, msg=f"pattern {l}")
    scores = out[Site("attn_scores", 0)]
    sinks = getattr(lm.layer_part("attn", 0), "sinks", None)  # GPT-OSS: a per-head sink logit
    if sinks is not None:  # the sink takes its share of the softmax, then is dropped
        sink = sinks.detach().float().reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        probs = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1]
    else:
        probs = torch.softmax(scores, -1)
    scale = score_scale(scores)
    assert_rounding_close(probs, ref[0].float(), depth=1, scale=scale, msg="softmax(scores)")


def check_suppression_layer0(lm, eng, ids) -> None:
    """At layer 0 the inputs are unchanged, so suppressed probabilities are the unsuppressed
    ones with the span removed and renormalised by the mass left (queries after the span
    only). The mass left is 1 minus the span's share: with attention sinks (GPT-OSS) a row
    of real keys sums to less than 1, and the sink keeps its share."""
    start, end = 3, 6
    site, scores = Site("pattern", 0), Site("attn_scores", 0)
    read = eng.run(ids, [Read(site), Read(scores)], logits=False)
    base, scale = read[site], score_scale(read[scores])
    sup = eng.run(ids, [SuppressAttention((start, end)), Read(site)], logits=False)[site]
    expected = base.clone()
    q = slice(end, None)
    sink_share = 1 - base[:, :, q].sum(-1, keepdim=True)  # [b, h, q, 1]
    expected[:, :, q, start:end] = 0
    left = expected[:, :, q].sum(-1, keepdim=True)
    if hasattr(lm.layer_part("attn", 0), "sinks"):
        left = left + sink_share  # (1 - removed), kept apart to avoid cancellation elsewhere
    expected[:, :, q] = expected[:, :, q] / left
    assert_rounding_close(sup, expected, depth=1, scale=scale, msg="suppressed layer 0")
    assert_rounding_close(sup[:, :, :end], base[:, :, :end], depth=1, scale=scale, msg="before")


def check_suppression_mask(lm, eng, ids) -> None:
    """Whole-model suppression equals the model run with a hand-built 4-D eager mask."""
    if not lm.causal:
        pytest.skip("4-D causal mask reference applies to causal decoders")
    start, end = 3, 6
    span = attention_span(lm.config)
    if span:  # a 4-D mask replaces a sliding window or attention chunk, so stay inside it
        ids = ids[:, : min(ids.shape[1], span)]
    seq = ids.shape[1]
    allowed = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    allowed[end:, start:end] = False
    mask = torch.zeros(seq, seq).masked_fill(~allowed, torch.finfo(torch.float32).min)
    got = eng.run(ids, [SuppressAttention((start, end))]).logits  # or a one-line refusal
    eager = copy.deepcopy(lm.model)
    eager.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            mask4 = mask[None, None].expand(ids.shape[0], 1, -1, -1)
            ref = eager(input_ids=ids, attention_mask=mask4)
    except (IndexError, RuntimeError, ValueError) as exc:  # OPT derives positions from a 2-D mask
        pytest.skip(f"the model takes no 4-D attention mask: {type(exc).__name__}")
    assert_rounding_close(got, ref.logits, depth=depth_of(lm), msg="suppression vs 4-D mask")


def check_lens(lm, eng, ids) -> None:
    last = Site("resid_post", lm.n_layers - 1)
    out = eng.run(ids, [Read(last)])  # the final norm and head recomputed: one stage
    assert_rounding_close(eng.unembed(out[last]), out.logits.float(), depth=1, msg="lens")


def check_no_hooks_after_error(lm, eng, ids) -> None:
    def hooks() -> list[tuple[int, ...]]:  # transformers may own hooks of its own: compare
        return [
            (*module._forward_hooks.keys(), -1, *module._forward_pre_hooks.keys())
            for module in lm.model.modules()
        ]

    before = hooks()
    bad = Patch(Site("resid_pre", 1), torch.zeros(3, 3, 3))  # wrong shape: raises mid-pass
    with pytest.raises(RuntimeError):
        eng.run(ids, [Read(Site("z", 0)), SuppressAttention((1, 2)), bad])
    assert hooks() == before
    assert attention_module.ACTIVE.get() is None
    ref = _hidden_states(lm, ids).logits
    assert_rounding_close(eng.run(ids).logits, ref, depth=depth_of(lm), msg="after an error")


CHECKS = [
    check_reads,
    check_self_patch,
    check_gates,
    check_pattern,
    check_suppression_layer0,
    check_suppression_mask,
    check_lens,
    check_no_hooks_after_error,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("family", FAMILIES)
def test_card_conformance(family: str, check) -> None:
    lm, eng = _model(f"tiny:{family}")
    check(lm, eng, _ids(lm))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_stories260k_conformance(stories_path, check) -> None:
    lm, eng = _model(str(stories_path))
    check(lm, eng, _ids(lm))


@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_smollm2_conformance(smollm2, check) -> None:
    eng = Engine.of(smollm2)
    check(smollm2, eng, _ids(smollm2, seq=10, batch=1))


def test_bidirectional_sees_the_future() -> None:
    """A LLaDA-style model attends both ways: changing the last token changes position 0."""
    lm, eng = _model("tiny:llada")
    ids = _ids(lm, batch=1)
    other = ids.clone()
    other[0, -1] = (other[0, -1] + 1) % lm.vocab_size
    a, b = eng.run(ids).logits, eng.run(other).logits
    assert_beyond_rounding(a[0, 0], b[0, 0], depth=depth_of(lm), scale=scale_of(a), msg="future")
    causal, ceng = _model("tiny:llama")
    a, b = ceng.run(ids).logits, ceng.run(other).logits
    assert_rounding_close(a[0, :-1], b[0, :-1], depth=depth_of(causal), msg="causal")


def test_expand_equals_repeated_batch() -> None:
    lm, eng = _model("tiny:qwen2")
    ids = _ids(lm, batch=1)
    site = Site("resid_pre", 2)
    value = torch.randn(4, ids.shape[1], lm.d_model)
    mask = torch.zeros(4, ids.shape[1], dtype=torch.bool)
    mask[torch.arange(4), torch.tensor([0, 3, 5, 7])] = True
    expanded = eng.run(ids, [Patch(site, value, mask=mask)], expand=(2, 4)).logits
    full = eng.run(ids.expand(4, -1), [Patch(site, value, mask=mask)]).logits
    assert_rounding_close(expanded, full, depth=depth_of(lm), msg="expand")


def test_gate_is_differentiable() -> None:
    lm, eng = _model("tiny:llama")
    ids = _ids(lm, batch=1)
    alpha = torch.ones(lm.n_layers, lm.n_heads, requires_grad=True)
    out = eng.run(ids, [Gate(alpha)], grad=True)
    out.logits[0, -1].logsumexp(-1).backward()
    assert alpha.grad is not None and alpha.grad.abs().sum() > 0


def test_reduce_attention_sees_each_layer_once() -> None:
    from mechscope.engine import ReduceAttention

    lm, eng = _model("tiny:mistral")
    ids = _ids(lm)
    out = eng.run(ids, [ReduceAttention(lambda layer, p: p.sum(-1))])
    assert sorted(out.reductions) == list(range(lm.n_layers))
    for _layer, values in out.reductions.items():
        assert len(values) == 1  # each row's T probabilities sum to 1: √T stages of rounding
        keys = ids.shape[1]
        assert_rounding_close(values[0], 1.0, depth=keys, scale=1.0, msg="row sums")


def test_module_is_unchanged_type() -> None:
    lm, _ = _model("tiny:gpt2")
    assert isinstance(lm.model, nn.Module)
