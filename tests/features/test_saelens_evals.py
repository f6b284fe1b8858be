"""mechscope's evaluation against SAELens's own ``run_evals``, the same SAE on the same model
and tokens, SAELens in its own environment (``MECHSCOPE_SAELENS_PYTHON``, as
``test_saelens_parity.py``). SAELens's side is a TransformerLens 3 model built from the HF
config and converted by TransformerLens's own ``convert_llama_weights``
(``benchmarks/tl_llama.py``); its logits are checked against the HF model's first.

Equal by definition, compared directly: explained variance (SAELens 6.54's
``ExplainedVarianceCalculator`` is against the mean, as ours; #665's against-zero form is
gone), MSE, cosine, L0, L1, CE without and with the SAE. Three definitions differ, and each
is compared both ways (ours computed on SAELens's per-token tensors, SAELens's computed by
mechscope's engine):

- SAELens's zero-ablation zeroes the BOS position too; ours keeps it (ablating the site, not
  the attention sink) — ``ce_loss_with_ablation``, ``ce_loss_score``, ``kl_div_score``;
- SAELens's KL averages every position after the BOS, the last one included; ours stops
  where CE does (the last position predicts nothing scored) — ``kl_div_with_sae``;
- ``explained_variance_legacy`` is a mean over tokens of per-token ratios against the
  batch's mean; ours is a ratio of means over all tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook, load_dictionary, save_saelens
from mechscope.engine import Edit, Engine, Read
from mechscope.features.config import CorpusConfig, EvalConfig
from mechscope.features.evaluate import evaluate, replace_fn
from mechscope.features.metrics import kl_rows, next_token_ce
from mechscope.features.run import contexts_for
from mechscope.features.sites import Where, sites_of
from mechscope.models import load_model
from tolerance import (
    assert_exact,
    assert_rounding_close,
    assert_within,
    depth_of,
    divergence_bound,
    logprob_scale,
    rounding_tolerance,
    scale_of,
)

PYTHON = os.environ.get("MECHSCOPE_SAELENS_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON or not Path(PYTHON).exists(), reason="MECHSCOPE_SAELENS_PYTHON is not set"
)
CHILD = Path(__file__).with_name("saelens_evals_child.py")


def _topk_sae(d_model: int, width: int, k: int, hook: Hook, scale: float) -> Dictionary:
    g = torch.Generator().manual_seed(3)
    w_dec = torch.randn(width, d_model, generator=g)
    w_dec = scale * w_dec / w_dec.norm(dim=-1, keepdim=True)
    config = DictionaryConfig(activation="topk", k=k, apply_b_dec_to_input=True, hook_in=hook)
    w_enc = w_dec.T / scale**2
    return Dictionary(w_enc.clone(), torch.zeros(width), w_dec, torch.zeros(d_model), config)


@torch.no_grad()
def _saelens_definitions(lm, d: Dictionary, where: Where, ids: torch.Tensor, batch: int):
    """SAELens's definitions computed by mechscope's engine: zero-ablation of every position,
    KL at every position after the BOS, and the legacy explained variance; with the
    reconstruction tensors' scales the bounds need."""
    eng, site = Engine.of(lm), sites_of(lm, where)[1]
    ce_zero, kl_sae, kl_zero, legacy, logit_scale = [], [], [], [], 0.0
    xs, x_hats = [], []
    for start in range(0, ids.shape[0], batch):
        chunk = ids[start : start + batch]
        clean = eng.run(chunk, [Read(site)], logits=True)
        logit_scale = max(logit_scale, scale_of(clean.logits))
        logp = torch.log_softmax(clean.logits[:, 1:].float(), -1)
        spliced = eng.run(chunk, [Edit(site, replace_fn("sae", d, None, None))], logits=True)
        zeroed = eng.run(chunk, [Edit(site, lambda a, ctx: torch.zeros_like(a))], logits=True)
        ce_zero.append(next_token_ce(zeroed.logits, chunk)[:, 1:])
        kl_sae.append(kl_rows(logp, spliced.logits[:, 1:]))
        kl_zero.append(kl_rows(logp, zeroed.logits[:, 1:]))
        x = clean[site][:, 1:].reshape(-1, lm.d_model).double()  # [b·(T−1), d]
        x_hat = d(x.float()).double()
        centred = (x - x.mean(0)).pow(2).sum(-1)
        legacy.append(1 - (x - x_hat).pow(2).sum(-1) / centred)
        xs.append(x)
        x_hats.append(x_hat)
    ce0, kls, kl0 = (torch.cat(v).double().mean().item() for v in (ce_zero, kl_sae, kl_zero))
    return {
        "ce_loss_with_ablation": ce0,
        "kl_div_with_sae": kls,
        "kl_div_with_ablation": kl0,
        "kl_div_score": (kl0 - kls) / kl0,
        "explained_variance_legacy": torch.cat(legacy).mean().item(),
        "logit_scale": logit_scale,
        "x": torch.cat(xs),
        "x_hat": torch.cat(x_hats),
    }


def _ratio_bound(num: float, den: float, d_num: float, d_den: float) -> float:
    """How far ``num / den`` moves when ``num`` and ``den`` move by ``d_num`` and ``d_den``."""
    return d_num / abs(den) + abs(num) * d_den / (abs(den) - d_den) ** 2


def _check(tmp_path: Path, lm, layer: int, width: int, k: int, context: int, n_eval: int):
    batch = 2
    ids = contexts_for(lm, CorpusConfig(context=context, n_eval=n_eval), 1).eval_ids
    bos = int(ids[0, 0])
    assert not (ids[:, 1:] == bos).any()  # SAELens masks the BOS by its id, we by position
    where = Where(layer, "resid_post", "resid_post")
    site = sites_of(lm, where)[1]
    x_scale = scale_of(Engine.of(lm).run(ids[:batch], [Read(site)])[site][:, 1:])
    folder = save_saelens(_topk_sae(lm.d_model, width, k, Hook("resid_post", layer, "m"),
                                    x_scale ** 0.5), tmp_path / "sae")  # fmt: skip
    d = load_dictionary(folder)
    config = EvalConfig(forward_batch=batch, n_resamples=10)
    ours = {
        k: v[0]
        for k, v in evaluate(lm, {"sae": (d, where)}, ids, config, progress=False)[
            "sae"
        ].metrics.items()
    }
    lm.model.save_pretrained(tmp_path / "hf")
    torch.save(ids, tmp_path / "ids.pt")
    args = [PYTHON, str(CHILD), str(tmp_path / "hf"), str(folder), str(tmp_path / "ids.pt"),
            str(tmp_path / "theirs.pt"), str(batch)]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = torch.load(tmp_path / "theirs.pt", weights_only=True)
    assert_rounding_close(theirs["tl_logits"], theirs["hf_logits"], depth=depth_of(lm),
                          msg="TransformerLens's conversion against the HF model")  # fmt: skip
    m = {k: v for group in json.loads(theirs["metrics"]).values() for k, v in group.items()}
    mine = _saelens_definitions(lm, d, where, ids, batch)

    # the reconstruction metrics, from the site's rounding through the pass: per dimension at
    # that dimension's own magnitude (the residual stream adds each dimension apart; a few
    # of smollm2's hold entries far above the rest), carried through the linear encoder and
    # decoder (the TopK choice held), plus the dictionary's own sums at its outputs' scale
    n, dm = ids.shape[0] * (ids.shape[1] - 1), lm.d_model
    x, x_hat = mine["x"], mine["x_hat"]  # [n, d] float64
    t = rounding_tolerance(1.0, depth_of(lm, layer)) * x.abs().amax(0)  # [d] per dimension
    w_enc, w_dec = d.w_enc.detach().double(), d.w_dec.detach().double()
    gain = float(torch.linalg.matrix_norm(w_enc, 2) * torch.linalg.matrix_norm(w_dec, 2))
    own = rounding_tolerance(scale_of(x_hat), dm + k) * dm**0.5
    dx, dx_hat = float(t.norm()), float(t.norm()) * gain + own  # per token, in norm
    r = (x - x_hat).norm(dim=-1)  # [n]
    d_sse = 2 * r * (dx + dx_hat)  # [n]
    d_mse = float(d_sse.mean()) + rounding_tolerance(ours["mse"], n)
    assert_within(ours["mse"], m["mse"], d_mse, msg="mse")
    centred = (x - x.mean(0)).norm(dim=-1)
    variance = float(centred.pow(2).mean())
    d_var = float((2 * centred * dx).mean()) + rounding_tolerance(variance, n)
    ev_bound = _ratio_bound(ours["mse"], variance, d_mse, d_var)
    assert_within(ours["explained_variance"], m["explained_variance"], ev_bound, msg="EV")
    b = ids.shape[0] // batch  # the legacy form's mean is over each batch's tokens
    c = (x.reshape(b, -1, dm) - x.reshape(b, -1, dm).mean(1, keepdim=True)).norm(dim=-1)
    c = c.reshape(-1)  # [n]
    per = d_sse / c.pow(2) + r.pow(2) * (2 * c * dx) / c.pow(4)  # [n] first order
    assert_within(mine["explained_variance_legacy"], m["explained_variance_legacy"],
                  float(per.mean()) + rounding_tolerance(1.0, n), msg="EV legacy")  # fmt: skip
    d_cos = 2 * (dx / x.norm(dim=-1) + dx_hat / x_hat.norm(dim=-1))  # [n]
    assert_within(ours["cossim"], m["cossim"], float(d_cos.mean()), msg="cossim")
    assert_exact(ours["l0"], float(k))  # TopK: exactly k features on every token, both sides
    assert_exact(m["l0"], float(k))
    d_f = float(w_enc.norm(dim=0).max()) * dx + rounding_tolerance(ours["l1"] / k, dm)
    assert_within(ours["l1"], m["l1"], k * d_f + rounding_tolerance(ours["l1"], n), msg="l1")

    # CE and KL: read off logits through every layer
    s, vocab, depth = mine["logit_scale"], lm.vocab_size, depth_of(lm)
    d_ce = rounding_tolerance(logprob_scale(s, vocab), depth + n)
    for name in ("ce_loss_without_sae", "ce_loss_with_sae"):
        assert_within(ours[name], m[name], d_ce, msg=name)

    def mean_kl_bound(per_token: torch.Tensor) -> float:
        return float(np.mean(divergence_bound(per_token, s, depth))) + rounding_tolerance(
            float(per_token.max()), n
        )

    # zero-ablation: SAELens's (BOS zeroed too) by both; ours (BOS kept) by both
    assert_within(mine["ce_loss_with_ablation"], m["ce_loss_with_ablation"], d_ce, msg="CE 0")
    ce0_kept = theirs["ce_loss_with_zero_but_bos"][:, 1:].double().mean().item()
    assert_within(ours["ce_loss_with_ablation"], ce0_kept, d_ce, msg="CE 0, BOS kept")
    for score, ablated in ((m["ce_loss_score"], mine["ce_loss_with_ablation"]),
                           (ours["ce_loss_score"], ce0_kept)):  # fmt: skip
        num, den = ablated - ours["ce_loss_with_sae"], ablated - ours["ce_loss_without_sae"]
        assert_within(num / den, score, _ratio_bound(num, den, 2 * d_ce, 2 * d_ce), msg="CE score")
    # KL: SAELens's (every position after the BOS) by both; ours (not the last) by both
    kl_all = theirs["kl_div_with_sae"][:, 1:]
    assert_within(mine["kl_div_with_sae"], m["kl_div_with_sae"], mean_kl_bound(kl_all), msg="KL")
    kl_ours = kl_all[:, :-1]
    assert_within(ours["kl_div_with_sae"], kl_ours.double().mean().item(),
                  mean_kl_bound(kl_ours), msg="KL, last position left out")  # fmt: skip
    kl0_all = theirs["kl_div_with_ablation"][:, 1:]
    d_kl0 = mean_kl_bound(kl0_all)
    assert_within(mine["kl_div_with_ablation"], m["kl_div_with_ablation"], d_kl0, msg="KL 0")
    num = mine["kl_div_with_ablation"] - mine["kl_div_with_sae"]
    bound = _ratio_bound(num, mine["kl_div_with_ablation"], d_kl0 + mean_kl_bound(kl_all), d_kl0)
    assert_within(mine["kl_div_score"], m["kl_div_score"], bound, msg="KL score")
    kl0_kept = theirs["kl_div_with_zero_but_bos"][:, 1:-1].double()
    kl_sae_ours = kl_ours.double().mean().item()
    num, den = kl0_kept.mean().item() - kl_sae_ours, kl0_kept.mean().item()
    d_kept = mean_kl_bound(kl0_kept)
    bound = _ratio_bound(num, den, d_kept + mean_kl_bound(kl_ours), d_kept)
    assert_within(ours["kl_div_score"], num / den, bound, msg="KL score, BOS kept")
    # the definitions do differ here: each check above compares like with like
    assert abs(ours["ce_loss_with_ablation"] - m["ce_loss_with_ablation"]) > 10 * d_ce


def test_run_evals_on_the_tiny_llama(tmp_path, tiny) -> None:
    _check(tmp_path, tiny, layer=1, width=96, k=8, context=16, n_eval=4)


@pytest.mark.slow
def test_run_evals_on_smollm2(tmp_path) -> None:
    lm = load_model("smollm2-135m")
    _check(tmp_path, lm, layer=6, width=1024, k=32, context=64, n_eval=4)
