"""Any module as a site, the norm-scale sites and mlp_pre, against plain torch hooks.

References: ``register_forward_hook`` / ``register_forward_pre_hook`` on the same module of
the same model, and each norm's scale written out from its input (RMS: ``sqrt(mean(x²) +
eps)``; layer norm: the same after centring).
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import (
    Capture,
    one_thread,  # noqa: F401  (autouse fixture)
)

from mechscope.engine import Ablate, Engine, Patch, Read, Site
from mechscope.engine.core.norms import factor_norm
from mechscope.errors import InputError, SiteError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of

FAMILIES = ["llama", "gpt2", "gpt_neox", "gemma3_text"]
ACT = {"llama": "model.layers.1.mlp.act_fn", "gpt2": "transformer.h.1.mlp.act"}
ACT |= {"gpt_neox": "gpt_neox.layers.1.mlp.act", "gemma3_text": "model.layers.1.mlp.act_fn"}


def _ids(seq: int = 9) -> torch.Tensor:
    return torch.randint(10, 300, (2, seq), generator=torch.Generator().manual_seed(1))


def _plain(lm, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return lm.model(input_ids=ids).logits


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    lm = load_model(f"tiny:{request.param}")
    return request.param, lm, Engine.of(lm)


def test_module_read_equals_a_plain_forward_hook_in_the_same_pass_as_card_sites(model) -> None:
    family, lm, eng = model
    ids = _ids()
    act = lm.model.get_submodule(ACT[family])
    sites = [Site.module(ACT[family]), Site.module(ACT[family], "input"), Site("resid_post", 1)]
    out = eng.run(ids, [Read(s) for s in sites])
    with Capture(act, output=True) as after, Capture(act) as before:
        _plain(lm, ids)
    torch.testing.assert_close(out[sites[0]], after.value, atol=0, rtol=0)
    torch.testing.assert_close(out[sites[1]], before.value, atol=0, rtol=0)
    # the module's input is the card's mlp_pre, and hooks are gone after the pass
    mlp_pre = eng.run(ids, [Read(Site("mlp_pre", 1))])[Site("mlp_pre", 1)]
    assert_rounding_close(mlp_pre, before.value, depth=depth_of(lm, 1), msg="mlp_pre 1")
    assert not act._forward_hooks and not act._forward_pre_hooks


def test_module_patch_and_ablation_equal_a_plain_hook(model) -> None:
    family, lm, eng = model
    ids = _ids()
    act = lm.model.get_submodule(ACT[family])
    zeroed = eng.run(ids, [Ablate(Site.module(ACT[family], positions=(3,)))]).logits

    def zero_pos3(module, args, output):
        output = output.clone()
        output[:, 3] = 0
        return output

    handle = act.register_forward_hook(zero_pos3)
    try:
        want = _plain(lm, ids)
    finally:
        handle.remove()
    assert_rounding_close(zeroed, want, depth=depth_of(lm), msg="ablated module")
    value = torch.full((2, 1, act_width(lm, eng, ids, family)), 0.5)
    patched = eng.run(ids, [Patch(Site.module(ACT[family], positions=(3,)), value)]).logits
    assert_beyond_rounding(patched, zeroed, depth=depth_of(lm), msg="patched module")


def act_width(lm, eng, ids, family) -> int:
    return int(eng.run(ids, [Read(Site.module(ACT[family]))])[Site.module(ACT[family])].shape[-1])


def test_norm_scales_equal_the_norms_own_formula_and_patch_exactly(model) -> None:
    family, lm, eng = model
    ids = _ids()
    sites = [Site("ln1_scale", 1), Site("ln2_scale", 1), Site("ln_final_scale")]
    out = eng.run(ids, [Read(s) for s in sites])
    modules = [lm.layer_part("ln1", 1), lm.layer_part("ln2", 1), lm.final_norm()]
    centred = family in ("gpt2", "gpt_neox")  # layer norms
    for site, module in zip(sites, modules, strict=True):
        with Capture(module) as x:
            _plain(lm, ids)
        h = x.value.float()
        if centred:
            h = h - h.mean(-1, keepdim=True)
        eps = getattr(module, "variance_epsilon", None) or module.eps
        want = (h.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        assert_rounding_close(out[site], want, depth=1, msg=f"{site}")  # one norm, recomputed
    # doubling the final scale halves the final norm's output minus its bias
    final = lm.final_norm()
    bias = getattr(final, "bias", None)
    doubled = eng.run(ids, [Patch(sites[2], out[sites[2]] * 2)]).logits

    def halve(module, args, output):
        return output if bias is None else (output - bias) / 2 + bias

    handle = final.register_forward_hook(halve if bias is not None else (lambda m, a, o: o / 2))
    try:
        want = _plain(lm, ids)
    finally:
        handle.remove()
    assert_rounding_close(doubled, want, depth=depth_of(lm), msg="final scale doubled")


def test_bad_paths_shared_modules_and_missing_norms_are_refused_in_one_line() -> None:
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    with pytest.raises(SiteError, match=r"closest: model\.layers\.1\.mlp\.act_fn") as info:
        eng.run(_ids(), [Read(Site.module("model.layers.1.mlp.act_fm"))])
    assert "\n" not in str(info.value)
    shared = load_model("tiny:llama")
    layers = shared.model.model.layers
    layers[1].mlp.act_fn = layers[0].mlp.act_fn  # one module called by two layers
    with pytest.raises(UnsupportedInterventionError, match="ran 2 times"):
        Engine.of(shared).run(_ids(), [Read(Site.module("model.layers.0.mlp.act_fn"))])
    with pytest.raises(UnsupportedInterventionError, match="share one activation"):
        Engine.of(shared).run(_ids(), [Read(Site("mlp_pre", 0))])
    bert = load_model("tiny:modernbert")
    with pytest.raises(UnsupportedInterventionError, match="names no norm before attention"):
        Engine.of(bert).run(_ids(), [Read(Site("ln1_scale", 0))])
    assert "neither an RMS nor a layer norm" in factor_norm(NotANorm(), 8)
    reason = factor_norm(torch.nn.Linear(8, 8), 8)
    assert isinstance(reason, str) and "epsilon" in reason


class NotANorm(torch.nn.Module):
    """Names an epsilon, but is no norm: factoring must refuse it."""

    eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def test_module_sites_need_a_path_and_only_they_take_one() -> None:
    with pytest.raises(InputError, match="path=… for a module site only") as info:
        Site("module")
    assert str(info.value).startswith("field 'path': ")
    with pytest.raises(InputError, match="io 'output' or 'input', got 'middle'") as info:
        Site.module("model.norm", "middle")  # a ValueError of the project's, in one line
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    with pytest.raises(InputError, match="got 'resid_pst' \\(did you mean 'resid_post'") as info:
        Site("resid_pst", 3)
    assert str(info.value).startswith("field 'name': ") and "\n" not in str(info.value)
    assert (
        str(Site.module("model.norm", positions=(1,))) == "module('model.norm', 'output')[pos[1]]"
    )
