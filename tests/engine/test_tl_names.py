"""TransformerLens' hook names in the cache and its ``names_filter``, against transformers'
own hidden states and eager attention probabilities and plain torch hooks on the modules
each hook stands for. A hook with no exact counterpart is a one-line ``SiteError`` naming
what to use, never a ``KeyError`` about a module path.

Families: llama, gpt2 (whose queries and keys are not rotated: ``hook_q`` maps), gemma2
and stories260K.
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import Capture, eager_copy, one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine.core.tl_names import rotates_qk
from mechscope.errors import SiteError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of, score_scale

TEXT = "When Mary and John went to the store, John gave"
#: Module paths written out per family: layers, attention output projection, MLP down
#: projection, first norm, embedding.
LLAMA = (
    "model.layers",
    "self_attn.o_proj",
    "mlp.down_proj",
    "input_layernorm",
    "model.embed_tokens",
)
PATHS = {
    "llama": LLAMA,
    "gpt2": ("transformer.h", "attn.c_proj", "mlp.c_proj", "ln_1", "transformer.wte"),
    "gemma2": LLAMA,
    "stories": LLAMA,
}


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma2", "stories"])
def family(request):
    if request.param == "stories":
        lm = load_model(str(request.getfixturevalue("stories_path")))
    else:
        lm = load_model(f"tiny:{request.param}")
    cache = lm.run_with_cache(
        TEXT, ["resid_pre", "resid_post", "z", "pattern", "mlp_post", "ln1_scale", "v", "q"]
    )
    return request.param, lm, cache


def test_hook_names_read_what_the_model_computed(family) -> None:
    name, lm, cache = family
    ids = cache.tokens.ids
    layers, o_proj, down, ln1, embed = PATHS[name]
    modules = lm.model.get_submodule
    with torch.no_grad():
        hf = lm.model(input_ids=ids, output_hidden_states=True)
    for layer in range(lm.n_layers - 1):  # transformers' last hidden state is normed
        got = cache[f"blocks.{layer}.hook_resid_post"]
        assert_rounding_close(got, hf.hidden_states[layer + 1], depth=depth_of(lm, layer))
        assert torch.equal(cache[f"blocks.{layer}.hook_resid_pre"], cache["resid_pre", layer])
    with (
        Capture(modules(f"{layers}.1.{o_proj}")) as z,
        Capture(modules(f"{layers}.1.{down}")) as post,
        Capture(modules(f"{layers}.1.{ln1}")) as norm_in,
        Capture(modules(embed), output=True) as emb,
        torch.no_grad(),
    ):
        lm.model(input_ids=ids)
    assert torch.equal(
        cache["blocks.1.attn.hook_z"], z.value.unflatten(-1, (lm.n_heads, lm.d_head))
    )
    assert torch.equal(cache["blocks.1.mlp.hook_post"], post.value)
    x = norm_in.value.float()
    if name == "gpt2":  # a layer norm: centred
        x = x - x.mean(-1, keepdim=True)
    eps = getattr(lm.config, "rms_norm_eps", None) or lm.config.layer_norm_epsilon
    scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    assert_rounding_close(cache["blocks.1.ln1.hook_scale"], scale, depth=1)
    names_emb = lm.run_with_cache(TEXT, ["hook_embed"])
    assert torch.equal(names_emb["hook_embed"], emb.value)
    eager = eager_copy(lm)
    with torch.no_grad():
        probs = eager(input_ids=ids, output_attentions=True).attentions[1]  # [b, h, q, k]
    got = cache["blocks.1.attn.hook_pattern"]
    assert_rounding_close(got, probs, depth=ids.shape[1], scale=score_scale(got))


def test_hook_q_maps_only_where_queries_are_not_rotated(family) -> None:
    name, lm, cache = family
    assert rotates_qk(lm) == (name != "gpt2")
    assert torch.equal(cache["blocks.1.attn.hook_rot_q"], cache["q", 1])
    assert torch.equal(cache["blocks.1.attn.hook_v"], cache["v", 1])
    if name == "gpt2":  # queries straight from c_attn's output, split by head
        c_attn = lm.model.get_submodule("transformer.h.1.attn.c_attn")
        with Capture(c_attn, output=True) as qkv, torch.no_grad():
            lm.model(input_ids=cache.tokens.ids)
        q = qkv.value[..., : lm.d_model].unflatten(-1, (lm.n_heads, lm.d_head))
        assert torch.equal(cache["blocks.1.attn.hook_q"], q)
    else:
        with pytest.raises(SiteError, match=r"hook_q has no exact mechscope site: use 'q' \("):
            cache["blocks.1.attn.hook_q"]


def test_names_filter_takes_hook_names_one_layer_each() -> None:
    lm = load_model("tiny:llama")
    cache = lm.run_with_cache(TEXT, names_filter="blocks.1.hook_resid_pre", logits=False)
    assert cache.keys() == [("resid_pre", 1)]
    mixed = lm.run_with_cache(TEXT, ["blocks.2.attn.hook_pattern", "mlp_out"], logits=False)
    assert sorted(mixed.keys()) == sorted([("mlp_out", l) for l in range(3)] + [("pattern", 2)])
    pred = lm.run_with_cache(TEXT, lambda n: n.endswith("hook_z"), stop_at_layer=2)
    assert sorted(pred.keys()) == [("z", 0), ("z", 1)]
    ours = lm.run_with_cache(TEXT, lambda n: n.startswith("resid"), logits=False)
    assert {k[0] for k in ours} == {"resid_pre", "resid_mid", "resid_post"}
    assert torch.equal(cache["blocks.1.hook_resid_pre"], ours["resid_pre", 1])


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        ("blocks.1.attn.hook_result", "use cache.stack_head_results(layer=1)"),
        ("blocks.1.hook_q_input", "use resid_pre"),
        ("blocks.1.ln1.hook_normalized", "use Site.module('model.layers.1.input_layernorm')"),
        ("blocks.1.mlp.hook_pre_linear", "Site.module of the MLP's up projection"),
        ("hook_pos_embed", "use resid_pre at layer 0"),
        ("blocks.1.hook_nothing", "unknown TransformerLens hook 'blocks.1.hook_nothing'"),
        ("blocks.7.hook_resid_pre", "layer 7 out of range"),
    ],
)
def test_a_hook_without_a_site_is_refused_in_one_line(hook: str, expected: str) -> None:
    lm = load_model("tiny:llama")
    cache = lm.run_with_cache(TEXT, ["resid_pre"], logits=False)
    for call in (lambda: cache[hook], lambda: lm.run_with_cache(TEXT, [hook])):
        with pytest.raises(SiteError) as err:
            call()
        assert expected in str(err.value) and "\n" not in str(err.value)
    assert hook not in cache


def test_a_hook_site_not_kept_says_what_the_cache_holds() -> None:
    lm = load_model("tiny:llama")
    cache = lm.run_with_cache(TEXT, ["resid_pre"], logits=False)
    with pytest.raises(KeyError, match="pattern layer 1 is not in the cache; it holds resid_pre"):
        cache["blocks.1.attn.hook_pattern"]
    with pytest.raises(KeyError, match=r"Site.module\('model.embed_tokens'\) is not in the cache"):
        cache["hook_embed"]
