"""ΔNLL / JS / KL of the paired lens against plain per-token loops over full softmaxes.

The kernels on synthetic logits are compared with an fp64 loop up to their own rounding
(:func:`_stats_bound`): each is one fp32 stage on given logits (depth 1; the native
kernel's Cephes exp and log are about 1 ulp, as torch's are), NLLs at a log-probability's
scale and divergences at the p-weighted magnitude of the log-probabilities they subtract.
Metrics of a model's lens are compared up to the rounding of the lens logits they are read
from (tests/tolerance.py).
"""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest
import torch
from lens_helpers import reference_lens_logprobs, sample_record
from scipy.spatial.distance import jensenshannon
from scipy.special import rel_entr

from mechscope.lens.divergence import paired_stats
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample
from mechscope.stats import js_from_logp, kl_from_logp
from tolerance import (
    READOUT_ROWS,
    assert_beyond_rounding,
    assert_lens_metrics_close,
    assert_rounding_close,
    assert_within,
    depth_of,
    logprob_scale,
    rounding_tolerance,
    scale_of,
    weighted_logp_scale,
)

LN2 = math.log(2.0)


def _plain(lpa: np.ndarray, lpb: np.ndarray, target: int) -> tuple[float, ...]:
    """One token, full softmaxes, fp64: NLLs, JS (scipy, squared, base e) and both KLs."""
    p, q = np.exp(lpa), np.exp(lpb)
    js = jensenshannon(p, q, base=math.e) ** 2
    return -lpa[target], -lpb[target], js, rel_entr(p, q).sum(), rel_entr(q, p).sum()


#: One vocabulary size for the kernel tests (the native kernel builds once per machine).
V = 512


def _stats_scales(z: torch.Tensor) -> np.ndarray:
    """``[5, rows]``: the scale rounding acts on in each of paired_stats' rows, computed in
    fp32 from the given logits ``z [rows, 2, V]``. NLL: ``z − max z − log Σe`` at
    :func:`logprob_scale`; JS and the KLs: the log-probabilities each term subtracts,
    weighted by its probability (:func:`weighted_logp_scale`)."""
    lp = torch.log_softmax(z.double(), -1)  # [rows, 2, V]
    la, lb = lp[:, 0], lp[:, 1]
    logm = torch.logaddexp(la, lb) - LN2
    top = z.double().abs().amax(dim=-1)  # [rows, 2]
    scales = np.stack(
        [
            logprob_scale(top[:, 0].numpy(), V),
            logprob_scale(top[:, 1].numpy(), V),
            (weighted_logp_scale(la, logm) + weighted_logp_scale(lb, logm)) / 2,
            weighted_logp_scale(la, lb),
            weighted_logp_scale(lb, la),
        ]
    )
    return scales


def _stats_bound(z: torch.Tensor) -> np.ndarray:
    """``[5, rows]``: what rounding may move each statistic: one stage (depth 1)."""
    return rounding_tolerance(_stats_scales(z), 1)


def _assert_stats_close(got, want, z: torch.Tensor, msg: str = "") -> None:
    bound = _stats_bound(z)
    for k, name in enumerate(("nll_a", "nll_b", "js", "kl_ab", "kl_ba")):
        assert_within(got[k], want[k], bound[k], msg=f"{msg} {name}")


#: The native kernel needs a C compiler; without one only the fallback test below runs.
needs_cc = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler (set CC)"
)
KERNELS = ["eager", pytest.param("native", marks=needs_cc)]


def _logits(seed: int, rows: int, scale: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, V, generator=gen) * scale  # [rows, 2, V]


def _fp64(z: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """``[5, rows]`` by the plain loop: one token at a time, full softmaxes, fp64."""
    lp = torch.log_softmax(z.double(), -1).numpy()
    return np.array([_plain(lp[r, 0], lp[r, 1], int(targets[r])) for r in range(z.shape[0])]).T


@pytest.mark.parametrize("kernel", KERNELS)
def test_paired_stats_equal_plain_loop_on_random_logits(kernel):
    z = _logits(0, 23, 3.0)
    z[5, 1] = z[5, 0]  # identical rows: JS = KL = 0
    targets = torch.randint(0, V, (23,), generator=torch.Generator().manual_seed(9))
    got = paired_stats(z, targets, kernel=kernel).numpy()  # [5, rows]
    _assert_stats_close(got, _fp64(z, targets), z, kernel)
    # identical rows: KL's terms are p · (lp − lp) = 0; JS's log m = log(2p) − ln 2 rounds
    assert got[3, 5] == 0.0 and got[4, 5] == 0.0
    assert_within(got[2, 5], 0.0, _stats_bound(z)[2, 5], msg="JS of identical rows")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("scale", "kind"), [(1.0, "random"), (30.0, "random"), (3.0, "close"), (20.0, "disjoint")]
)
def test_paired_stats_accuracy_across_regimes(kernel, scale, kind):
    """Flat, peaked, nearly identical (JS ~ 1e-5) and nearly disjoint (JS ~ ln 2) pairs:
    every statistic within its rounding (:func:`_stats_bound`). For nearly identical pairs
    that bound (~3e-5: log-probabilities near −6 rounded in fp32) exceeds JS and the KLs
    themselves, so there the check is that no term blows up, not their relative accuracy."""
    z = _logits(1, 12, scale)
    if kind == "close":
        z[:, 1] = z[:, 0] + 0.01 * torch.randn(12, V, generator=torch.Generator().manual_seed(2))
    elif kind == "disjoint":
        z[:, 1] = -z[:, 0]
    targets = torch.arange(12) * 7
    got, want = paired_stats(z, targets, kernel=kernel).numpy(), _fp64(z, targets)
    _assert_stats_close(got, want, z, f"{kernel} {kind} {scale:g}")


@pytest.mark.parametrize("kernel", KERNELS)
def test_underflowing_mixture_terms_are_zero_not_nan(kernel):
    """Where p + q underflows to 0 (both logits far below the maximum) the terms are 0."""
    z = _logits(3, 6, 2.0)
    z[:, :, :100] = -1e4  # p = q = 0 exactly in fp32 and fp64
    z[2, 0, 100:200] = -200.0  # only p underflows here
    targets = torch.full((6,), 300)
    got = paired_stats(z, targets, kernel=kernel).numpy()
    assert np.isfinite(got).all()
    _assert_stats_close(got, _fp64(z, targets), z, kernel)


def test_paired_stats_match_stats_divergences():
    """Same numbers as mechscope.stats' (unfused) divergences, in fp32."""
    z = _logits(1, 9, 5.0)
    got = paired_stats(z, torch.zeros(9, dtype=torch.long), kernel="eager")
    lp = torch.log_softmax(z, -1)
    bound = _stats_bound(z)
    assert_within(got[2], js_from_logp(lp[:, 0], lp[:, 1]), bound[2], msg="js")
    assert_within(got[3], kl_from_logp(lp[:, 0], lp[:, 1]), bound[3], msg="kl_ab")
    assert_within(got[4], kl_from_logp(lp[:, 1], lp[:, 0]), bound[4], msg="kl_ba")


@needs_cc
def test_kernels_agree():
    z, t = _logits(4, 30, 4.0), torch.arange(30)
    eager, nat = paired_stats(z, t, kernel="eager"), paired_stats(z, t, kernel="native")
    _assert_stats_close(nat.numpy(), eager.numpy(), z, "native vs eager")


@pytest.mark.parametrize("kernel", KERNELS)
def test_js_bounded(kernel):
    z = _logits(2, 40, 20.0)  # near one-hot: JS close to ln 2
    z[:, 1] = -z[:, 0]
    js = paired_stats(z, torch.zeros(40, dtype=torch.long), kernel=kernel)[2]
    assert float(js.max()) <= LN2 and float(js.min()) >= 0.0
    assert float(js.max()) > 0.69  # the bound is approached, not trivially met


@pytest.mark.parametrize("kernel", KERNELS)
def test_js_symmetric_and_kl_swap(kernel):
    """Swapping the conditions gives bit-identical JS and exactly swapped KLs and NLLs:
    both conditions' sums come from the same operation (symmetric by construction)."""
    z = _logits(3, 40, 3.0)
    t = torch.randint(0, V, (40,), generator=torch.Generator().manual_seed(3))
    ab, ba = paired_stats(z, t, kernel=kernel), paired_stats(z.flip(1), t, kernel=kernel)
    torch.testing.assert_close(ab[2], ba[2], atol=0, rtol=0)  # JS(A‖B) = JS(B‖A)
    torch.testing.assert_close(ab[3], ba[4], atol=0, rtol=0)  # KL(A‖B) = KL(B‖A) swapped
    torch.testing.assert_close(ab[0], ba[1], atol=0, rtol=0)
    kl_scale = float(_stats_scales(z)[3:].max())
    assert_beyond_rounding(ab[3], ab[4], depth=1, scale=kl_scale, msg="KL is not symmetric")


def test_without_a_compiler_auto_falls_back_to_eager(monkeypatch, tmp_path):
    """``CC`` naming no program: the build fails with the reason, ``auto`` warns once and
    computes with the eager kernel, and asking for ``native`` explicitly is an error."""
    from mechscope.lens import divergence, native

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "failure", None)
    monkeypatch.setattr(divergence, "_warned", False)
    z, t = _logits(5, 7, 3.0), torch.arange(7)
    with pytest.warns(RuntimeWarning, match="could not be built.*no C compiler"):
        got = paired_stats(z, t)
    torch.testing.assert_close(got, paired_stats(z, t, kernel="eager"), atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="unavailable: no C compiler"):
        paired_stats(z, t, kernel="native")


@needs_cc
def test_native_kernel_cache_and_bad_targets(monkeypatch, tmp_path):
    """A fresh cache gets one library; a second process-level load reuses it; a target
    outside the vocabulary is refused before C reads it; a cache folder that cannot be
    created means no kernel (and a reason), not a crash."""
    from mechscope.lens import native

    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "failure", None)
    assert native.load() is not None, native.failure
    built = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    assert len(built) == 1 and built[0].startswith("paired_stats-") and built[0].endswith(".so")
    monkeypatch.setattr(native, "_tried", False)
    assert native.load() is not None
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == built
    with pytest.raises(IndexError, match=r"targets must lie in \[0, 512\)"):
        paired_stats(_logits(6, 3, 1.0), torch.tensor([0, 512, 1]), kernel="native")
    (tmp_path / "file").write_text("")  # a cache that cannot be a folder: no build, no crash
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path / "file"))
    monkeypatch.setattr(native, "_tried", False)
    assert native.load() is None and "Error" in (native.failure or "")


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
    ref_a, s_a = reference_lens_logprobs(tiny, ca.ids)  # [L, seq, V], largest |lens logit|
    ref_b, s_b = reference_lens_logprobs(tiny, cb.ids)
    want = np.zeros(diff.metrics.shape)  # [6, L, T]
    for layer in range(tiny.n_layers):
        for t, target in enumerate(prep.cont_ids):
            lpa = ref_a[layer, ca.cont_start + t - 1]  # the prediction of token t
            lpb = ref_b[layer, cb.cont_start + t - 1]
            nll_a, nll_b, js, kl_ab, kl_ba = _plain(lpa, lpb, target)
            want[:, layer, t] = [nll_a, nll_b, nll_a - nll_b, js, kl_ab, kl_ba]
    top, v, depth = max(s_a, s_b), tiny.vocab_size, depth_of(tiny)
    assert_lens_metrics_close(diff.metrics, want, logit_scale=top, vocab=v, depth=depth)


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
    scale, depth = logprob_scale(float(logits.abs().max()), tiny.vocab_size), depth_of(tiny)
    assert_rounding_close(last, right, depth=depth, scale=scale, msg="NLL")
    assert_beyond_rounding(last, wrong, depth=depth, scale=scale, msg="the slot after")


def test_last_layer_lens_equals_model_logits(tiny, engine):
    from mechscope.engine import Read, Site

    ids = torch.tensor([tiny.tokenizer(sample_record()["continuation"]).input_ids])
    out = engine.run(ids, [Read(Site("resid_post", tiny.n_layers - 1))])
    lens = engine.unembed(out.reads[Site("resid_post", tiny.n_layers - 1)])
    assert_rounding_close(lens, out.logits.float(), depth=1, msg="the head, recomputed")


@pytest.mark.parametrize("kernel", KERNELS)
def test_readout_does_not_depend_on_workers_or_chunks(tiny, engine, kernel):
    """The readout's tasks write disjoint slices: any worker count gives identical numbers,
    and other chunk sizes give the same numbers within fp32 rounding of the unembedding."""
    from mechscope.lens.readout import readout_layers

    gen = torch.Generator().manual_seed(6)
    ha = torch.randn(tiny.n_layers, 11, tiny.d_model, generator=gen)  # [L, T, d_model]
    hidden = (ha, ha + 2.0 * torch.randn(ha.shape, generator=gen))
    targets = torch.randint(0, tiny.vocab_size, (11,), generator=gen)
    one = readout_layers(engine, hidden, targets, chunk=3, kernel=kernel, workers=1)
    three = readout_layers(engine, hidden, targets, chunk=3, kernel=kernel, workers=3)
    torch.testing.assert_close(three, one, atol=0, rtol=0)
    whole = readout_layers(engine, hidden, targets, chunk=11, kernel=kernel, workers=2)
    top, v = max(scale_of(engine.unembed(h)) for h in hidden), tiny.vocab_size
    assert_lens_metrics_close(whole, one, logit_scale=top, vocab=v, depth=1, rows=READOUT_ROWS)
    assert float(one[2].max()) > 1e-3  # the conditions differ: JS is not trivially 0


@pytest.mark.parametrize("workers", [1, 2])
def test_readout_equals_each_chunk_read_out_on_its_own(tiny, engine, workers):
    """Each worker writes its chunks' logits into one reused buffer; a shorter last chunk
    and stale contents from the previous chunk change nothing: every chunk equals a fresh
    unembedding of it and :func:`paired_stats` of that, bit for bit."""
    from mechscope.lens.divergence import paired_stats
    from mechscope.lens.readout import readout_layers

    gen = torch.Generator().manual_seed(8)
    ha = torch.randn(tiny.n_layers, 7, tiny.d_model, generator=gen)  # [L, T, d_model]
    hb = ha + torch.randn(ha.shape, generator=gen)
    targets = torch.randint(0, tiny.vocab_size, (7,), generator=gen)
    got = readout_layers(engine, (ha, hb), targets, chunk=3, workers=workers)  # [5, L, T]
    for layer in range(tiny.n_layers):
        for s in range(0, 7, 3):
            with torch.inference_mode():
                z = engine.unembed(torch.stack([ha[layer, s : s + 3], hb[layer, s : s + 3]], 1))
                want = paired_stats(z, targets[s : s + 3])  # [5, c]
            torch.testing.assert_close(got[:, layer, s : s + 3], want, atol=0, rtol=0)
