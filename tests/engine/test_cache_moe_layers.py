"""``run_with_cache`` with its default sites on models that mix dense and mixture-of-experts
layers: every site a layer supports is kept, and what a layer cannot hold is left out and
named in one line (it refused the whole call with "mlp_post is not supported at layer 1").

The kept reads are checked against a plain forward hook on the module the card names; a
site asked for by name is still refused where a layer has no module for it.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from mechscope.engine import Engine
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import load_model

MIXED = [
    "deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite", "ernie4_5_moe", "exaone_moe",
    "mimo_v2_flash", "afmoe", "llama4_text",
]  # fmt: skip
PROMPTS = ["When Mary and John went to the store", "Once upon a time"]


def _dense_and_moe(lm) -> tuple[list[int], list[int]]:
    dense, moe = [], []
    for layer in range(lm.n_layers):
        try:
            lm.layer_part("mlp_down", layer)
        except AttributeError:
            moe.append(layer)
        else:
            dense.append(layer)
    return dense, moe


@pytest.mark.parametrize("model_type", MIXED)
def test_default_sites_are_kept_per_layer_and_the_rest_named(model_type: str) -> None:
    lm = load_model(f"tiny:{model_type}")
    eng = Engine.of(lm)
    dense, moe = _dense_and_moe(lm)
    assert dense and moe, "the tiny model mixes dense and mixture-of-experts layers"
    seen: list[torch.Tensor] = []
    down = lm.layer_part("mlp_down", dense[0])
    handle = down.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = eng.run_with_cache(PROMPTS)
    finally:
        handle.remove()
    lines = [str(w.message) for w in caught if "leaves out" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert f"mlp_post at layers {', '.join(map(str, moe))} of tiny:{model_type}" in lines[0]
    assert torch.equal(cache["mlp_post", dense[0]], seen[0].view_as(cache["mlp_post", dense[0]]))
    for layer in range(lm.n_layers):  # every other default site at every layer
        assert ("resid_post", layer) in cache.reads and ("mlp_out", layer) in cache.reads
    with pytest.raises(KeyError, match="mixture-of-experts layer"):
        cache["mlp_post", moe[0]]
    dla = cache.logit_attribution(" Mary", " John")  # heads kept, no partial neuron stack
    assert dla.heads is not None and dla.neurons is None
    with pytest.raises(UnsupportedInterventionError, match=f"at layer {moe[0]}") as info:
        eng.run_with_cache(PROMPTS, ["mlp_post"])  # named: refused where a layer has none
    assert "\n" not in str(info.value)


def test_a_model_of_one_kind_warns_nothing() -> None:
    lm = load_model("tiny:llama")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = Engine.of(lm).run_with_cache(PROMPTS)
    assert all(("mlp_post", l) in cache.reads for l in range(lm.n_layers))
