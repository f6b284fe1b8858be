"""Features as sites, spliced exactly, on eight tiny families.

A splice keeps the error term: the site is the activation plus the change of the
reconstruction, so a dictionary whose features are read (or patched with their own
values) leaves the logits bit for bit as they were, and ablating feature ``f`` moves the
site by exactly ``-a_f · W_dec[f]``, whatever else the dictionary reconstructs badly
(random dictionaries here: their reconstructions are far from the activations).
"""

from __future__ import annotations

import pytest
import torch

from dictionary_fixtures import random_dictionary as random_relu
from mechscope.dictionaries import CrossLayerTranscoder, Dictionary, DictionaryConfig, Hook
from mechscope.engine import Ablate, Edit, Engine, Patch, Read, Site, Steer
from mechscope.engine.core.feature_sites import site_width
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_exact, assert_rounding_close

FAMILIES = ["llama", "gpt2", "gpt_neox", "gemma3_text", "qwen2", "qwen3", "mistral", "gemma2"]
N_FEATURES = 96
IDS = torch.tensor([[3, 17, 42, 9, 28, 5, 61, 12], [7, 7, 30, 2, 19, 44, 8, 23]])


def random_dictionary(width: int, hook_in: Hook, hook_out: Hook | None = None, seed: int = 0):
    """A ReLU dictionary of ``width`` whose encoder fires on a third of its features."""
    return random_relu(width, hook_in, hook_out, seed=seed, n_features=N_FEATURES)


@pytest.fixture(scope="module", params=FAMILIES)
def eng(request: pytest.FixtureRequest) -> Engine:
    return Engine.of(load_model(f"tiny:{request.param}"))


def _dictionaries(eng: Engine) -> list[tuple[Dictionary, Site]]:
    """An SAE on the residual stream, one on the heads' z, and a transcoder from the MLP's
    input to its output, each with the site its features write to."""
    lm = eng.lm
    out = [
        (random_dictionary(lm.d_model, Hook("resid_post", 1)), Site("resid_post", 1)),
        (random_dictionary(site_width(lm, "z"), Hook("z", 1), seed=1), Site("z", 1)),
    ]
    if lm.card.ln2 is not None:
        tc = random_dictionary(lm.d_model, Hook("mlp_in", 0), Hook("mlp_out", 0), seed=2)
        out.append((tc, Site("mlp_out", 0)))
    return out


def test_unchanged_features_leave_logits_bit_for_bit(eng: Engine) -> None:
    base = eng.run(IDS).logits
    for d, _ in _dictionaries(eng):
        read = eng.run(IDS, [Read(Site.feature(d))])
        acts = read[Site.feature(d)]
        assert bool((acts > 0).any()), "the random dictionary fires"
        assert_exact(read.logits, base, msg=f"{d}: features read")
        same = eng.run(IDS, [Patch(Site.feature(d, (2, 5)), acts[..., [2, 5]].clone())])
        assert_exact(same.logits, base, msg=f"{d}: features patched with their own values")
        edited = eng.run(IDS, [Edit(Site.feature(d), lambda f, ctx: f.clone())])
        assert_exact(edited.logits, base, msg=f"{d}: an Edit returning the same features")
        zero = eng.run(IDS, [Steer(Site.feature(d, 3), torch.tensor(1.0), alpha=0.0)])
        assert_exact(zero.logits, base, msg=f"{d}: a steer of scale 0")


def test_ablating_a_feature_moves_the_site_by_its_decoder_row(eng: Engine) -> None:
    for d, out_site in _dictionaries(eng):
        base = eng.run(IDS, [Read(Site.feature(d)), Read(out_site)])
        acts = base[Site.feature(d)]  # [b, s, d_sae]
        f = int((acts > 0).sum((0, 1)).argmax())  # the feature active most often
        ablated = eng.run(IDS, [Ablate(Site.feature(d, f)), Read(out_site)])
        contribution = -acts[..., f, None] * d.w_dec[f]  # [b, s, d_out]
        if out_site.name == "z":
            contribution = contribution.unflatten(-1, base[out_site].shape[-2:])
        want = base[out_site] + contribution
        assert_exact(ablated[out_site], want, msg=f"{d}: ablated feature {f}")
        assert not torch.equal(ablated.logits, base.logits), "the ablation reached the logits"


def test_one_position_steered_moves_only_that_position(eng: Engine) -> None:
    d, site = _dictionaries(eng)[0]
    base = eng.run(IDS, [Read(Site.feature(d, 4)), Read(site)])
    one = Site.feature(d, 4, positions=(5,))
    steered = eng.run(IDS, [Steer(one, torch.tensor(1.0), alpha=3.0), Read(site)])
    a = base[Site.feature(d, 4)][:, 5, None]  # [b, 1]: feature 4 at position 5
    want = base[site].clone()
    want[:, 5] = want[:, 5] + ((a + 3.0) - a) * d.w_dec[4]  # the change the feature made
    assert_exact(steered[site], want, msg="steered feature 4 at position 5")


def test_cross_layer_transcoder_writes_every_later_layer() -> None:
    eng = Engine.of(load_model("tiny:llama"))
    lm, n, width = eng.lm, eng.lm.n_layers, eng.lm.d_model
    g = torch.Generator().manual_seed(5)
    clt = CrossLayerTranscoder(
        torch.randn(n, width, N_FEATURES, generator=g) / width**0.5,
        torch.randn(n, N_FEATURES, generator=g) * 0.1,
        [torch.randn(N_FEATURES, n - i, width, generator=g) * 0.2 for i in range(n)],
        torch.zeros(n, width),
        DictionaryConfig("relu", kind="cross_layer_transcoder", hook_in=Hook("resid_mid", None),
                         hook_out=Hook("mlp_out", None)),
    ).requires_grad_(False)  # fmt: skip
    clt.w_dec[0][:, 0] = 0.0  # source 0 writes to layers 1 … only: layer 1 is then exact
    source = clt.source(0)
    outs = [Site("mlp_out", j) for j in range(lm.n_layers)]
    base = eng.run(IDS, [Read(Site.feature(source)), *(Read(s) for s in outs)])
    acts = base[Site.feature(source)]
    f = int((acts > 0).sum((0, 1)).argmax())
    ablated = eng.run(IDS, [Ablate(Site.feature(source, f)), *(Read(s) for s in outs)])
    assert_exact(ablated[outs[0]], base[outs[0]], msg="layer 0: no decoder to it")
    want = base[outs[1]] + (-acts[..., f, None] * clt.w_dec[0][f, 1])
    assert_exact(ablated[outs[1]], want, msg=f"cross-layer feature {f} at layer 1")
    assert not torch.equal(ablated[outs[2]], base[outs[2]]), "layer 2 moved too"
    read = eng.run(IDS, [Read(Site.feature(clt.source(i))) for i in range(n)])
    assert_exact(read.logits, eng.run(IDS).logits, msg="cross-layer features read")


def test_a_dictionary_that_does_not_fit_is_refused_in_one_line() -> None:
    eng = Engine.of(load_model("tiny:llama"))
    lm = eng.lm
    cases = [
        (random_dictionary(lm.d_model + 1, Hook("resid_post", 1)), "input width"),
        (random_dictionary(lm.d_model, Hook("resid_post", lm.n_layers)), "at layer"),
        (random_dictionary(lm.d_model, Hook("resid_post", 1, model="gemma-2-2b")), "trained on"),
    ]
    for d, what in cases:
        with pytest.raises(UnsupportedInterventionError, match=what) as err:
            eng.run(IDS, [Read(Site.feature(d))])
        assert "\n" not in str(err.value)
    d = random_dictionary(lm.d_model, Hook("resid_post", 1))
    with pytest.raises(SiteError, match="feature 96 out of range"):
        eng.run(IDS, [Ablate(Site.feature(d, N_FEATURES))])


def test_run_with_cache_keeps_features_sparse() -> None:
    eng = Engine.of(load_model("tiny:llama"))
    d = random_dictionary(eng.lm.d_model, Hook("resid_post", 1))
    cache = eng.run_with_cache(IDS, "resid_post", sites=[Site.feature(d)])
    acts = cache[Site.feature(d)]
    assert acts.is_sparse and tuple(acts.shape) == (*IDS.shape, N_FEATURES)
    with torch.no_grad():
        assert_exact(acts.to_dense(), d.encode(cache["resid_post", 1]), msg="cached features")
    assert_exact(cache[Site.feature(d, 7)], acts.to_dense()[..., 7], msg="one feature")
    assert_exact(cache.logits, eng.run(IDS).logits, msg="logits of a cache with features")


def test_gradients_reach_the_features_for_attribution() -> None:
    """Under ``grad=True`` a read feature site is upstream of the logits (attribution
    patching over features: ``(f_source - f_base) · ∂metric/∂f``), the logits still bit for
    bit the model's, and ``∂metric/∂f`` is the site's gradient through the decoder."""
    eng = Engine.of(load_model("tiny:llama"))
    d = random_dictionary(eng.lm.d_model, Hook("resid_post", 1))
    site, feature = Site("resid_post", 1), Site.feature(d)
    out = eng.run(IDS, [Read(feature), Read(site)], grad=True)
    assert_exact(out.logits.detach(), eng.run(IDS).logits, msg="logits with gradients on")
    metric = out.logits[:, -1, 7].sum()
    grad_f, grad_site = torch.autograd.grad(metric, [out[feature], out[site]])
    assert bool(grad_f.abs().sum() > 0)
    assert_rounding_close(grad_f, grad_site @ d.w_dec.T, depth=1, msg="∂metric/∂f")
