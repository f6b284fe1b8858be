"""ΔNLL / JS / KL of the paired lens against plain per-token loops over full softmaxes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lens_helpers import reference_lens_logprobs, sample_record
from scipy.spatial.distance import jensenshannon
from scipy.special import rel_entr

from mechscope.lens.logit_lens import paired_stats
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample
from mechscope.stats import js_from_logp, kl_from_logp

LN2 = math.log(2.0)


def _plain(lpa: np.ndarray, lpb: np.ndarray, target: int) -> tuple[float, ...]:
    """One token, full softmaxes, fp64: NLLs, JS (scipy, squared, base e) and both KLs."""
    p, q = np.exp(lpa), np.exp(lpb)
    js = jensenshannon(p, q, base=math.e) ** 2
    return -lpa[target], -lpb[target], js, rel_entr(p, q).sum(), rel_entr(q, p).sum()


def test_paired_stats_equal_plain_loop_on_random_logits():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(23, 2, 300, generator=gen) * 3.0  # [rows, 2, V]
    z[5, 1] = z[5, 0]  # identical rows: JS = KL = 0
    targets = torch.randint(0, 300, (23,), generator=gen)
    got = paired_stats(z, targets).numpy()  # [5, rows]
    lp = torch.log_softmax(z.double(), -1).numpy()
    for r in range(23):
        want = _plain(lp[r, 0], lp[r, 1], int(targets[r]))
        np.testing.assert_allclose(got[:, r], want, atol=2e-6, rtol=1e-5)
    assert got[2, 5] == pytest.approx(0.0, abs=1e-6) and got[3, 5] == pytest.approx(0.0, abs=1e-6)


def test_paired_stats_match_stats_divergences():
    """Same numbers as mechscope.stats' (unfused) divergences, in fp32."""
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(9, 2, 500, generator=gen) * 5.0
    got = paired_stats(z, torch.zeros(9, dtype=torch.long))
    lp = torch.log_softmax(z, -1)
    torch.testing.assert_close(got[2], js_from_logp(lp[:, 0], lp[:, 1]), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got[3], kl_from_logp(lp[:, 0], lp[:, 1]), atol=5e-6, rtol=1e-5)
    torch.testing.assert_close(got[4], kl_from_logp(lp[:, 1], lp[:, 0]), atol=5e-6, rtol=1e-5)


def test_js_bounded():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(40, 2, 200, generator=gen) * 20.0  # near one-hot: JS close to ln 2
    z[:, 1] = -z[:, 0]
    js = paired_stats(z, torch.zeros(40, dtype=torch.long))[2]
    assert float(js.max()) <= LN2 and float(js.min()) >= 0.0
    assert float(js.max()) > 0.69  # the bound is approached, not trivially met


def test_js_symmetric_and_kl_swap():
    """Swapping the conditions keeps JS, swaps the KLs and the NLLs (fp32: atol 1e-6 for JS
    of moderate distributions; the fused form's error grows like 1e-7 x KL)."""
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(40, 2, 200, generator=gen) * 3.0
    t = torch.randint(0, 200, (40,), generator=gen)
    ab, ba = paired_stats(z, t), paired_stats(z.flip(1), t)
    torch.testing.assert_close(ab[2], ba[2], atol=1e-6, rtol=0)  # JS(A‖B) = JS(B‖A)
    torch.testing.assert_close(ab[3], ba[4], atol=1e-5, rtol=1e-6)  # KL(A‖B) = KL(B‖A) swapped
    torch.testing.assert_close(ab[0], ba[1], atol=0, rtol=0)
    assert float((ab[3] - ab[4]).abs().max()) > 1e-2  # KL itself is not symmetric


@pytest.mark.parametrize("position_matched", [False, True])
def test_sample_metrics_equal_plain_loop_on_tiny_model(tiny, engine, position_matched):
    prep = prepare_sample(
        parse_sample(sample_record(), "t"), tiny.tokenizer, ("a", "b"), max_context=tiny.max_context
    )
    diff = analyse_sample(
        engine,
        prep,
        PairedOptions(position_matched=position_matched, attention=False, chunk_tokens=5),
    )
    ca, cb = prep.conditions["a"], prep.conditions["b"]
    ref_a = reference_lens_logprobs(tiny, ca.ids)  # [L, seq, V]
    ref_b = reference_lens_logprobs(tiny, cb.ids)
    for layer in range(tiny.n_layers):
        for t, target in enumerate(prep.cont_ids):
            lpa = ref_a[layer, ca.cont_start + t - 1]  # the prediction of token t
            lpb = ref_b[layer, cb.cont_start + t - 1]
            nll_a, nll_b, js, kl_ab, kl_ba = _plain(lpa, lpb, target)
            got = diff.metrics[:, layer, t]
            np.testing.assert_allclose(
                got, [nll_a, nll_b, nll_a - nll_b, js, kl_ab, kl_ba], atol=2e-5, rtol=1e-4
            )


def test_off_by_one_prediction_position(tiny, engine):
    """Token t is scored from position cont_start + t - 1, not cont_start + t."""
    prep = prepare_sample(
        parse_sample(sample_record(), "t"), tiny.tokenizer, ("a", "b"), max_context=tiny.max_context
    )
    diff = analyse_sample(engine, prep, PairedOptions(attention=False))
    ca = prep.conditions["a"]
    with torch.no_grad():
        logits = tiny.model(torch.tensor([ca.ids])).logits[0].double()  # [seq, V]
    lp = torch.log_softmax(logits, -1).numpy()
    ids = np.asarray(ca.ids)
    right = -lp[ca.cont_start - 1 : ca.cont_start - 1 + prep.n_tokens][
        np.arange(prep.n_tokens), ids[ca.cont_start :]
    ]
    wrong = (
        -lp[ca.cont_start : ca.cont_start + prep.n_tokens][  # token t read at its own slot
            np.arange(prep.n_tokens), ids[ca.cont_start :]
        ]
    )
    last = diff.metric("nll_a")[-1]
    np.testing.assert_allclose(last, right, atol=1e-5)
    assert np.abs(last - wrong).max() > 1e-2  # the test can tell the two apart


def test_last_layer_lens_equals_model_logits(tiny, engine):
    from mechscope.engine import Read, Site

    ids = torch.tensor([tiny.tokenizer(sample_record()["continuation"]).input_ids])
    out = engine.run(ids, [Read(Site("resid_post", tiny.n_layers - 1))])
    lens = engine.unembed(out.reads[Site("resid_post", tiny.n_layers - 1)])
    torch.testing.assert_close(lens, out.logits.float(), atol=1e-5, rtol=1e-5)
