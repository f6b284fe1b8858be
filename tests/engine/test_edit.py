"""``Edit(site, fn)``: your own function inside the pass, against plain torch hooks.

A dictionary splice (encode with a random sparse dictionary, edit two features, decode, add
back the error) written as an ``Edit`` must equal the same splice as a plain forward hook on
the module, bit for bit: the layer's output (``resid_post``), the down projection's input
(``mlp_post``) and the output projection's input (``z``), on llama, gpt2, gemma2 and the
trained stories260K. So must its gradients. ``fn`` returning None leaves the logits bit for
bit; an error inside ``fn`` reaches the caller with every hook removed; the context's mask
is the batch's padding; ``reads=`` hands ``fn`` earlier sites of the same pass; generation
runs the edit at every new token (against transformers' ``generate`` with the hook).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine import Edit, Engine, Read, Site
from mechscope.engine.core import attention
from mechscope.engine.core.inputs import to_tokens
from mechscope.engine.generation.decode_step import capture_refusal
from mechscope.engine.generation.sampling import Sampling
from mechscope.errors import InputError, SiteError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

TEXTS = ["When Mary and John went to the store, John gave", "Once upon a time"]
#: Module paths written out per family (not read from the card): layer, MLP down
#: projection, attention output projection, at layer 1.
PATHS = {
    "llama": ("model.layers.1", "model.layers.1.mlp.down_proj", "model.layers.1.self_attn.o_proj"),
    "gemma2": ("model.layers.1", "model.layers.1.mlp.down_proj", "model.layers.1.self_attn.o_proj"),
    "gpt2": ("transformer.h.1", "transformer.h.1.mlp.c_proj", "transformer.h.1.attn.c_proj"),
}
PATHS["stories"] = PATHS["llama"]


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma2", "stories"])
def family(request) -> tuple[str, Engine]:
    if request.param == "stories":
        lm = load_model(str(request.getfixturevalue("stories_path")))
    else:
        lm = load_model(f"tiny:{request.param}")
    return request.param, Engine.of(lm)


def dictionary(width: int, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A random sparse dictionary over vectors of ``width``: encode, zero feature 3 and
    double feature 5, decode, add back the reconstruction error of the unedited features."""
    gen = torch.Generator().manual_seed(seed)
    n = 4 * width
    w_enc = torch.randn(width, n, generator=gen) / width**0.5
    w_dec = torch.randn(n, width, generator=gen) / n**0.5
    b_enc, b_dec = torch.randn(n, generator=gen) * 0.1, torch.randn(width, generator=gen) * 0.1

    def splice(h: torch.Tensor) -> torch.Tensor:
        features = torch.relu((h - b_dec) @ w_enc + b_enc)
        error = h - (features @ w_dec + b_dec)
        edited = features.clone()
        edited[..., 3] = 0.0
        edited[..., 5] *= 2.0
        return edited @ w_dec + b_dec + error

    return splice


def _hooked(lm, path: str, kind: str, fn: Callable[[torch.Tensor], torch.Tensor]):
    """A plain torch hook applying ``fn`` at ``path``: to its output, or to its input."""
    module = lm.model.get_submodule(path)
    if kind == "output":

        def post(module, args, out):
            if isinstance(out, tuple):
                return (fn(out[0]), *out[1:])
            return fn(out)

        return module.register_forward_hook(post)

    def pre(module, args, kwargs):
        if args:
            return (fn(args[0]), *args[1:]), kwargs
        key = next(iter(kwargs))
        return args, {**kwargs, key: fn(kwargs[key])}

    return module.register_forward_pre_hook(pre, with_kwargs=True)


def _forward(lm, tokens, **kwargs) -> torch.Tensor:
    return lm.model(
        input_ids=tokens.ids,
        attention_mask=tokens.attention_mask,
        position_ids=tokens.position_ids,
        **kwargs,
    ).logits


def _cases(lm, name: str):
    """(site, module path, hook kind, width, how the hook's tensor maps to the site)."""
    layer, down, o_proj = PATHS[name]
    heads, d_head = lm.n_heads, lm.d_head
    as_z = (lambda x: x.unflatten(-1, (heads, d_head)), lambda z: z.flatten(-2))
    same = (lambda x: x, lambda x: x)
    width_mlp = lm.model.get_submodule(down).weight.shape[1 if name != "gpt2" else 0]
    return [
        (Site("resid_post", 1), layer, "output", lm.d_model, same),
        (Site("mlp_post", 1), down, "input", width_mlp, same),
        (Site("z", 1), o_proj, "input", d_head, as_z),
    ]


def test_a_dictionary_splice_equals_the_plain_hook_bit_for_bit(family) -> None:
    name, eng = family
    lm = eng.lm
    tokens = to_tokens(lm, TEXTS)
    for site, path, kind, width, (to_site, back) in _cases(lm, name):
        splice = dictionary(width)
        edit = Edit(site, lambda act, ctx, splice=splice: splice(act))
        out = eng.run(TEXTS, [edit])
        handle = _hooked(lm, path, kind, lambda x, s=splice, t=to_site, b=back: b(s(t(x))))
        try:
            with torch.no_grad():
                want = _forward(lm, tokens)
        finally:
            handle.remove()
        assert torch.equal(out.logits, want), (name, str(site))
        assert not torch.equal(out.logits, eng.run(TEXTS).logits), (name, str(site))


def test_gradients_through_an_edit_equal_the_plain_hooks(family) -> None:
    name, eng = family
    lm = eng.lm
    tokens = to_tokens(lm, TEXTS)
    layer = PATHS[name][0]
    scale = torch.tensor(1.5, requires_grad=True)
    out = eng.run(TEXTS, [Edit(Site("resid_post", 1), lambda a, c: a * scale)], grad=True)
    (got,) = torch.autograd.grad(out.logits.square().sum(), scale)
    handle = _hooked(lm, layer, "output", lambda x: x * scale)
    try:
        (want,) = torch.autograd.grad(_forward(lm, tokens).square().sum(), scale)
    finally:
        handle.remove()
    assert torch.equal(got, want) and float(got) != 0.0


def test_none_from_fn_leaves_the_logits_bit_for_bit(family) -> None:
    _, eng = family
    base = eng.run(TEXTS).logits
    sites = [Site("resid_pre", 0), Site("resid_mid", 1), Site("attn_out", 1)]
    sites += [Site("mlp_out", 0), Site("z", 1, head=1, positions=(-1,)), Site("ln2_scale", 1)]
    edits = [Edit(s, lambda a, c: None) for s in sites]
    assert torch.equal(eng.run(TEXTS, edits).logits, base)
    reads = eng.run(TEXTS, [*edits, Read(Site("resid_post", 1))])
    assert torch.equal(
        reads[Site("resid_post", 1)],
        eng.run(TEXTS, [Read(Site("resid_post", 1))])[Site("resid_post", 1)],
    )


def _hook_count(lm) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules())


def test_an_error_in_fn_propagates_with_every_hook_removed(family) -> None:
    _, eng = family
    lm = eng.lm
    base, hooks = eng.run(TEXTS).logits, _hook_count(lm)

    def boom(act, ctx):
        raise RuntimeError("inside fn")

    for site in (Site("resid_post", 1), Site("z", 1), Site("attn_scores", 1)):
        with pytest.raises(RuntimeError, match=r"^inside fn$"):
            eng.run(TEXTS, [Read(Site("resid_pre", 0)), Edit(site, boom)])
        assert _hook_count(lm) == hooks and attention.ACTIVE.get() is None
    with pytest.raises(InputError, match=r"field 'fn': expected fn at resid_post.1 to return"):
        eng.run(TEXTS, [Edit(Site("resid_post", 1), lambda a, c: a[:, :1])])
    assert _hook_count(lm) == hooks
    assert torch.equal(eng.run(TEXTS).logits, base)


def test_the_context_reads_earlier_sites_of_the_same_pass(family) -> None:
    name, eng = family
    lm = eng.lm
    tokens = to_tokens(lm, TEXTS)
    embed = Site("resid_pre", 0)

    def minus_embed(act, ctx):
        return act - 0.5 * ctx[embed]

    out = eng.run(TEXTS, [Edit(Site("resid_post", 1), minus_embed, reads=[embed])])
    kept: dict = {}
    first = lm.model.get_submodule(PATHS[name][0].rsplit(".", 1)[0] + ".0")
    handles = [
        first.register_forward_pre_hook(
            lambda m, a, k: kept.update(x=a[0] if a else k["hidden_states"]), with_kwargs=True
        ),
        _hooked(lm, PATHS[name][0], "output", lambda x: x - 0.5 * kept["x"]),
    ]
    try:
        with torch.no_grad():
            want = _forward(lm, tokens)
    finally:
        for h in handles:
            h.remove()
    assert torch.equal(out.logits, want)
    assert out.reads == {}  # what an edit reads is kept for the pass only
    later = Edit(Site("resid_post", 0), minus_embed, reads=[Site("resid_pre", 1)])
    with pytest.raises(SiteError, match=r"resid_pre\.0 has no value yet when resid_post\.0 runs"):
        eng.run(TEXTS, [later])


def test_the_context_mask_is_the_padding_of_the_rows_the_site_sees() -> None:
    eng = Engine.of(load_model("tiny:llama"))
    tokens = to_tokens(eng.lm, TEXTS)
    seen: dict = {}

    def keep(name):
        def fn(act, ctx):
            seen[name] = (ctx.mask, ctx.site, ctx.layer, act.shape)

        return fn

    scores = Site("attn_scores", 1, positions=(-1, -2))
    eng.run(TEXTS, [Edit(Site("resid_pre", 1), keep("all")), Edit(scores, keep("scores"))])
    real = tokens.attention_mask.bool()
    assert torch.equal(seen["all"][0], real) and seen["all"][2] == 1
    assert torch.equal(seen["scores"][0], real[:, [-1, -2]]) and seen["scores"][1] == scores
    one = to_tokens(eng.lm, TEXTS[0])
    eng.run(one, [Edit(Site("resid_post", 1), keep("expand"))], expand=(1, 3))
    assert seen["expand"][0].shape == (3, one.ids.shape[1]) and bool(seen["expand"][0].all())


def test_an_edit_in_an_expanded_sweep_sees_every_row() -> None:
    """One prompt, three variants from layer 1 on, each row edited by its own amount: the
    rows equal the prompt repeated three times and edited the same way."""
    eng = Engine.of(load_model("tiny:llama"))
    lm = eng.lm
    one = to_tokens(lm, TEXTS[0])

    def per_row(act, ctx):
        return act * (1.0 + torch.arange(act.shape[0], dtype=act.dtype))[:, None, None]

    site = Site("resid_post", 1)
    swept = eng.run(one, [Edit(site, per_row)], expand=(1, 3)).logits
    repeated = eng.run(one.ids.repeat(3, 1), [Edit(site, per_row)]).logits
    assert_rounding_close(swept, repeated, depth=depth_of(lm))


def test_run_with_cache_reads_see_the_edit() -> None:
    lm = load_model("tiny:gpt2")
    splice = dictionary(lm.d_model)
    edit = Edit(Site("resid_post", 0), lambda a, c: splice(a))
    cache = lm.run_with_cache(TEXTS, ["resid_post"], interventions=[edit])
    tokens = to_tokens(lm, TEXTS)
    kept: dict = {}
    handles = [
        _hooked(lm, "transformer.h.0", "output", splice),
        lm.model.get_submodule("transformer.h.1").register_forward_hook(
            lambda m, a, out: kept.update(h=out[0] if isinstance(out, tuple) else out)
        ),
    ]
    try:
        with torch.no_grad():
            _forward(lm, tokens)
    finally:
        for h in handles:
            h.remove()
    assert torch.equal(cache["resid_post", 1], kept["h"])


def _hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = lm.model.generate(
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0
        )
    return out[0, len(ids) :].tolist()


def test_generation_runs_the_edit_at_every_new_token(family) -> None:
    name, eng = family
    lm = eng.lm
    text = TEXTS[1]
    splice = dictionary(lm.d_model, seed=1)
    shift = 3.0 * torch.randn(lm.d_model, generator=torch.Generator().manual_seed(2))
    edit = Edit(Site("resid_pre", 1), lambda a, c: splice(a) + shift)
    got = list(eng.generate(text, Sampling(8), interventions=[edit])[0][0].tokens)
    handle = _hooked(lm, PATHS[name][0], "input", lambda x: splice(x) + shift)
    try:
        want = _hf_greedy(lm, to_tokens(lm, text).row(0), 8)
    finally:
        handle.remove()
    assert got == want[: len(got)] and len(got) > 0
    plain = list(eng.generate(text, Sampling(8))[0][0].tokens)
    if name == "stories":  # a trained model's text moves with the edit
        assert got != plain


def test_a_recorded_decode_step_leaves_an_edit_to_eager_steps() -> None:
    lm = load_model("tiny:llama")
    why = capture_refusal(lm, [Edit(Site("resid_pre", 1), lambda a, c: None)])
    assert why is not None and "Edit" in why


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: Edit(Site("pattern", 1), lambda a, c: None), "field 'site': expected a site"),
        (lambda: Edit(Site("logits"), lambda a, c: None), "'logits', which is read only"),
        (lambda: Edit(Site("z", 1), "not a function"), "field 'fn': expected fn(activation"),
        (lambda: Edit(Site("z", 1), lambda a, c: None, reads=["z"]), "field 'reads'"),
    ],
)
def test_a_bad_edit_is_refused_when_made(make, expected) -> None:
    with pytest.raises(InputError) as err:
        make()
    assert expected in str(err.value) and "\n" not in str(err.value)
