"""The evaluation metrics against independent computations: plain numpy formulas of their
definitions, a loop over positions with F.cross_entropy, torch's kl_div (SAELens's _kl),
and the whole evaluation against transformers' own forward with a plain torch hook."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mechscope.dictionaries import Dictionary, DictionaryConfig
from mechscope.features.config import CorpusConfig, EvalConfig
from mechscope.features.evaluate import evaluate
from mechscope.features.metrics import kl_rows, next_token_ce, reconstruction_sums, summarize
from mechscope.features.run import contexts_for
from mechscope.features.sites import Where
from tolerance import assert_beyond_rounding, assert_fp64_close, assert_rounding_close, depth_of


def _synthetic(seed: int = 0, n_ctx: int = 6, t: int = 9, d: int = 5, f: int = 12):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_ctx, t, d, generator=g, dtype=torch.float64) + 7.0  # a large mean
    x_hat = x + 0.3 * torch.randn(n_ctx, t, d, generator=g, dtype=torch.float64)
    feats = torch.relu(torch.randn(n_ctx, t, f, generator=g, dtype=torch.float64) - 1.0)
    return x, x_hat, feats


def test_reconstruction_metrics_equal_their_textbook_formulas() -> None:
    x, x_hat, feats = _synthetic()
    sums = reconstruction_sums(x, x_hat, feats)
    got = {k: v[0] for k, v in summarize(sums, n_resamples=20).items()}
    flat_x, flat_hat = x.reshape(-1, x.shape[-1]).numpy(), x_hat.reshape(-1, x.shape[-1]).numpy()
    flat_f = feats.reshape(-1, feats.shape[-1]).numpy()
    n = flat_x.shape[0]
    centred = flat_x - flat_x.mean(0)  # the variance around the mean, computed directly
    ev = 1 - ((flat_x - flat_hat) ** 2).sum() / (centred**2).sum()
    assert_fp64_close(got["explained_variance"], ev, terms=n, scale=1.0)
    assert_fp64_close(got["mse"], ((flat_x - flat_hat) ** 2).sum(1).mean(), terms=n)
    cos = [
        a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(flat_x, flat_hat, strict=True)
    ]
    assert_fp64_close(got["cossim"], np.mean(cos), terms=n)
    assert_fp64_close(got["l0"], np.mean([(row != 0).sum() for row in flat_f]), terms=n)
    assert_fp64_close(got["l1"], np.abs(flat_f).sum(1).mean(), terms=n)
    density = (flat_f != 0).mean(0)
    assert got["dead"] == (density == 0).mean()
    assert got["dense"] == (density > 0.1).mean()
    # against zero (SAELens before #665's fix) is another, larger number on a stream with a mean
    against_zero = 1 - ((flat_x - flat_hat) ** 2).sum() / (flat_x**2).sum()
    assert against_zero > got["explained_variance"] + 0.05


def test_intervals_resample_contexts_and_hold_the_value() -> None:
    x, x_hat, feats = _synthetic(n_ctx=20)
    out = summarize(reconstruction_sums(x, x_hat, feats), n_resamples=200)
    for name in ("explained_variance", "mse", "l0"):
        value, low, high = out[name]
        assert low <= value <= high, name
    one = summarize(reconstruction_sums(x[:1], x_hat[:1], feats[:1]))
    assert np.isnan(one["mse"][1])  # one context: nothing to resample


def test_next_token_ce_and_kl_against_a_loop_and_torch() -> None:
    g = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(2, 6, 11, generator=g)
    other = logits + torch.randn(2, 6, 11, generator=g)
    ids = torch.randint(0, 11, (2, 6), generator=g)
    ce = next_token_ce(logits, ids)
    loop = torch.tensor(
        [[F.cross_entropy(logits[b, t], ids[b, t + 1]).item() for t in range(5)] for b in range(2)]
    )
    assert_rounding_close(ce, loop, depth=1, scale=float(logits.abs().max()) + np.log(11))
    logp = torch.log_softmax(logits, -1)
    kl = kl_rows(logp, other)
    # SAELens's _kl: F.kl_div(log_softmax(new), softmax(original)).sum(-1)
    ref = F.kl_div(torch.log_softmax(other, -1), torch.softmax(logits, -1), reduction="none")
    assert_rounding_close(kl, ref.sum(-1), depth=11, scale=float(logits.abs().max()) * 4)


def test_ce_scores_are_saelens_ratios_of_means() -> None:
    x, x_hat, feats = _synthetic(n_ctx=4)
    sums = reconstruction_sums(x, x_hat, feats)
    ce = {k: np.array([2.0, 2.2, 1.9, 2.1]) * m for k, m in
          (("ce_clean", 1.0), ("ce_sae", 1.1), ("ce_zero", 3.0), ("ce_mean", 1.6))}  # fmt: skip
    kl = {"kl_sae": np.array([0.1, 0.2, 0.1, 0.3]), "kl_zero": np.array([2.0, 1.0, 3.0, 2.0])}
    sums.update(ce, **kl, kl_mean=kl["kl_zero"] / 2, n_ce=np.full(4, 8.0))
    got = {k: v[0] for k, v in summarize(sums, n_resamples=20).items()}
    keys = ("ce_clean", "ce_sae", "ce_zero", "ce_mean")
    clean, sae, zero, mean = (ce[k].sum() / 32 for k in keys)
    assert_fp64_close(got["ce_loss_score"], (zero - sae) / (zero - clean), terms=32, scale=10.0)
    score_mean = (mean - sae) / (mean - clean)
    assert_fp64_close(got["ce_loss_score_mean"], score_mean, terms=32, scale=10.0)
    kl_sae, kl_zero = kl["kl_sae"].sum() / 32, kl["kl_zero"].sum() / 32
    assert_fp64_close(got["kl_div_score"], (kl_zero - kl_sae) / kl_zero, terms=32)


def _random_sae(d_model: int, width: int = 24, seed: int = 0) -> Dictionary:
    g = torch.Generator().manual_seed(seed)
    w_dec = torch.randn(width, d_model, generator=g)
    w_dec /= w_dec.norm(dim=-1, keepdim=True)
    config = DictionaryConfig(activation="topk", k=4, apply_b_dec_to_input=True)
    return Dictionary(w_dec.T.clone(), torch.zeros(width), w_dec, torch.zeros(d_model), config)


def test_evaluation_against_a_plain_hook_on_transformers_forward(tiny) -> None:
    """CE with the splice, zeros and the mean at resid_post[1], computed by transformers'
    forward with a torch hook on the layer module; the reconstruction metrics from its
    hidden states."""
    corpus = CorpusConfig(context=12, n_eval=3)
    ids = contexts_for(tiny, corpus, 1).eval_ids
    sae = _random_sae(tiny.d_model)
    where = Where(1, "resid_post", "resid_post")
    got = evaluate(tiny, {"sae": (sae, where)}, ids, EvalConfig(forward_batch=2, n_resamples=20),
                   progress=False)["sae"]  # fmt: skip
    model, layer = tiny.model, tiny.layer_module(1)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[2][:, 1:]  # resid_post[1]
        mean = hidden.double().reshape(-1, hidden.shape[-1]).mean(0).float()

        def run(replace):
            def hook(_module, _args, output):
                h = output[0] if isinstance(output, tuple) else output
                h = h.clone()
                h[:, 1:] = replace(h[:, 1:])
                return (h, *output[1:]) if isinstance(output, tuple) else h

            handle = layer.register_forward_hook(hook)
            try:
                logits = model(ids).logits.float()
            finally:
                handle.remove()
            logp = torch.log_softmax(logits[:, 1:-1], -1)
            return -logp.gather(-1, ids[:, 2:, None]).squeeze(-1).mean()

        ce = {
            "ce_loss_without_sae": run(lambda h: h),
            "ce_loss_with_sae": run(lambda h: sae(h)),
            "ce_loss_with_ablation": run(torch.zeros_like),
            "ce_loss_with_mean_ablation": run(lambda h: mean.expand_as(h)),
        }
    depth = depth_of(tiny)
    for name, value in ce.items():
        assert_rounding_close(got.metrics[name][0], value, depth=depth, scale=20.0, msg=name)
    flat = hidden.reshape(-1, hidden.shape[-1]).double()
    rec = sae(hidden).reshape(-1, hidden.shape[-1]).double()
    ev = 1 - ((flat - rec) ** 2).sum() / ((flat - flat.mean(0)) ** 2).sum()
    assert_rounding_close(got.metrics["explained_variance"][0], ev, depth=depth, scale=1.0)
    spliced, clean = ce["ce_loss_with_sae"], ce["ce_loss_without_sae"]
    assert_beyond_rounding(spliced, clean, depth=depth, scale=20.0)
