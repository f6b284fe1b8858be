"""Steering against independent computations: transformers' own forward and ``generate``
with a plain forward hook adding the vector, transformers' hidden states for the CAA mean
difference; projection removes exactly the component; alpha 0 is the unsteered run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mechscope.engine import Engine, Read, Site, Steer
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models import load_model
from mechscope.steering import SteerConfig, caa_vector, steer_sweep
from mechscope.steering.samples import Contrast, SteerPrompt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_tiny import eager_copy

from tolerance import assert_rounding_close, depth_of, rounding_tolerance

PROMPTS = ["When Mary and John went to the store", "Once upon a time, there was", "def add(a, b):"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=["tiny:llama", "tiny:qwen3", "tiny:gemma3"])
def lm(request):
    return load_model(request.param)


def _plain(lm):
    """An independent copy of the model on transformers' own attention, no engine state."""
    return eager_copy(lm, "sdpa")


def _hooked(model, lm, site: str, layer: int, vec: torch.Tensor, alpha: float):
    """A plain forward hook adding ``alpha * vec`` at ``resid_pre`` / ``resid_post``."""
    block = model.get_decoder().layers[layer]
    if site == "resid_pre":
        return block.register_forward_pre_hook(
            lambda m, args, kwargs: (
                ((args[0] + alpha * vec, *args[1:]), kwargs)
                if args
                else (args, {**kwargs, "hidden_states": kwargs["hidden_states"] + alpha * vec})
            ),
            with_kwargs=True,
        )

    def post(module, args, out):
        return (out[0] + alpha * vec, *out[1:]) if isinstance(out, tuple) else out + alpha * vec

    return block.register_forward_hook(post)


def _ids(lm, text: str) -> list[int]:
    return lm.tokenizer(text)["input_ids"]


@pytest.mark.parametrize("site", ["resid_pre", "resid_post"])
def test_steered_greedy_generation_equals_transformers_generate_with_a_hook(lm, site):
    vec = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(1))
    vec = 4 * vec / vec.norm()
    layer, alpha, n = 1, 1.5, 12
    prompts = [Prompt(_ids(lm, p), seeds=[0]) for p in PROMPTS]
    steer = Steer(Site(site, layer), vec, alpha)
    ours = Engine.of(lm).generate(prompts, Sampling(n), slots=2, interventions=[steer])
    plain = _plain(lm)
    handle = _hooked(plain, lm, site, layer, vec, alpha)
    try:
        for prompt, got in zip(prompts, ours, strict=True):
            ids = torch.tensor([list(prompt.ids)])
            out = plain.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
            want = out[0, ids.shape[1] :].tolist()
            eos = lm.tokenizer.eos_token_id
            want = want[: want.index(eos)] if eos in want else want
            assert list(got[0].tokens) == want
    finally:
        handle.remove()
    unsteered = Engine.of(lm).generate(prompts, Sampling(n), slots=2)
    assert [o[0].tokens for o in ours] != [o[0].tokens for o in unsteered]  # it steers


def test_alpha_zero_is_exactly_the_unsteered_run(lm):
    eng = Engine.of(lm)
    vec = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(2))
    prompts = [Prompt(_ids(lm, p), seeds=[0]) for p in PROMPTS]
    zero = Steer(Site("resid_pre", 1), vec, 0.0)
    plain = eng.generate(prompts, Sampling(10), slots=3)
    steered = eng.generate(prompts, Sampling(10), slots=3, interventions=[zero])
    assert [o[0].tokens for o in steered] == [o[0].tokens for o in plain]
    ids = torch.tensor([_ids(lm, PROMPTS[0])])
    assert torch.equal(eng.run(ids, [zero]).logits, eng.run(ids).logits)
    rows = Steer(Site("resid_pre", 1), vec, torch.tensor([0.0, 3.0]))  # packed: row 0 is α 0
    packed = eng.run(ids, [rows], logits=1, expand=(1, 2)).logits
    alone = eng.run(ids, logits=1).logits[0]  # a 1-row batch rounds its sums its own way
    assert_rounding_close(packed[0], alone, depth=depth_of(lm))


@pytest.mark.parametrize("site", ["resid_mid", "mlp_out", "z"])
def test_projection_removes_exactly_the_component(lm, site):
    eng = Engine.of(lm)
    head = 1 if site == "z" else None
    where = Site(site, 1, head=head)
    size = lm.d_head if site == "z" else lm.d_model
    vec = torch.randn(size, generator=torch.Generator().manual_seed(3))
    unit = vec / vec.norm()
    ids = torch.tensor([_ids(lm, p)[:6] for p in PROMPTS])
    before = eng.run(ids, [Read(where)], logits=False)[where].float()  # [b, s, size]
    after = eng.run(ids, [Steer(where, vec, 1.0, "project"), Read(where)], logits=False)[where]
    scale = float(before.norm(dim=-1).max())  # one projection, fp32, at the vector's norm
    tol = rounding_tolerance(scale, 1)
    assert float((after @ unit).abs().max()) <= tol
    assert float((before @ unit).abs().max()) > 100 * tol  # there was a component to remove
    orth = lambda h: h - (h @ unit)[..., None] * unit  # noqa: E731
    assert_rounding_close(orth(after), orth(before), depth=1, scale=scale, msg="the rest")


def test_a_steered_run_with_cache_equals_the_steered_runs_reads(lm):
    """``run_with_cache(..., interventions=[steer])`` is the steered pass: every cached site
    (attention probabilities among them, read on the side) and the logits are bit for bit
    those of ``Engine.run`` with the same steers and explicit reads, and of the steered run
    with no read at all (reading never changes a number). Padded rows, a residual steer and
    a per-head steer of the queries, so the attention work is exercised too."""
    from mechscope.engine.core.inputs import to_tokens

    eng = Engine.of(lm)
    gen = torch.Generator().manual_seed(5)
    steers = [
        Steer(Site("resid_pre", 1), 3 * torch.randn(lm.d_model, generator=gen), 2.0),
        Steer(Site("q", 1, head=0), torch.randn(lm.d_head, generator=gen), 1.5),
    ]
    names = ["resid_pre", "resid_post", "z", "q", "pattern"]
    cache = lm.run_with_cache(PROMPTS, names, interventions=steers)
    tokens = to_tokens(lm, PROMPTS)
    assert tokens.attention_mask is not None  # the prompts differ in length: padded rows
    batch = {"attention_mask": tokens.attention_mask, "position_ids": tokens.position_ids}
    sites = [Site(n, layer) for n in names for layer in range(lm.n_layers)]
    steered = eng.run(tokens.ids, [*steers, *map(Read, sites)], **batch)
    assert set(cache) == {s.key for s in sites}
    for site in sites:
        assert torch.equal(cache[site.name, site.layer], steered[site]), site
    assert torch.equal(cache.logits, steered.logits)
    assert torch.equal(cache.logits, eng.run(tokens.ids, steers, **batch).logits)
    plain = lm.run_with_cache(PROMPTS, names)
    assert torch.equal(plain["resid_post", 0], cache["resid_post", 0])  # below the steers
    assert not torch.equal(plain["resid_pre", 1], cache["resid_pre", 1])  # it steers
    assert not torch.equal(plain["pattern", 1], cache["pattern", 1])  # so does the q steer


def test_caa_vector_equals_the_mean_difference_of_hidden_states(lm):
    pairs = [
        Contrast("a", "The food was wonderful", "The food was terrible"),
        Contrast("b", "Mary was happy", "Mary was sad today"),  # lengths differ
        Contrast("c", "def add(a, b): good", "def add(a, b): bad"),
    ]
    layer = 2
    got = caa_vector(lm, pairs, Site("resid_pre", layer))
    plain = _plain(lm)

    def last(text: str) -> torch.Tensor:
        with torch.no_grad():
            out = plain(torch.tensor([_ids(lm, text)]), output_hidden_states=True)
        return out.hidden_states[layer][0, -1].double()  # the input of layer ``layer``

    want = sum(last(p.positive) - last(p.negative) for p in pairs) / len(pairs)
    scale = max(float(last(p.positive).abs().max()) for p in pairs)
    assert_rounding_close(got.double(), want, depth=depth_of(lm, layer), scale=scale)


def test_sweep_metrics_equal_a_hooked_forward_per_alpha(lm):
    vec = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(4))
    prompts = [SteerPrompt(f"p{i}", p, " the", " a") for i, p in enumerate(PROMPTS[:2])]
    config = SteerConfig(layer=1, alphas=(-3.0, 0.0, 2.0), max_new_tokens=0, policy="first")
    result = steer_sweep(lm, vec, prompts, config, progress=False)
    plain = _plain(lm)
    for i, p in enumerate(prompts):
        ids = torch.tensor([_ids(lm, p.prompt)])
        target = lm.tokenizer(" the", add_special_tokens=False)["input_ids"][0]
        versus = lm.tokenizer(" a", add_special_tokens=False)["input_ids"][0]
        for j, alpha in enumerate(result.alphas):
            handle = _hooked(plain, lm, "resid_pre", 1, vec, float(alpha))
            try:
                with torch.no_grad():
                    logits = plain(ids).logits[0, -1].float()
            finally:
                handle.remove()
            want = float(logits[target] - logits[versus])
            scale = float(logits.abs().max())  # a difference of two logits
            got = result.metrics["logit_diff"][i, j]
            assert_rounding_close(got, want, depth=depth_of(lm), scale=scale)


def test_refusals():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    vec = torch.ones(lm.d_model)
    with pytest.raises(InputError, match="finite alpha"):
        Steer(Site("resid_pre", 0), vec, float("nan"))
    with pytest.raises(InputError, match="non-zero direction"):
        Steer(Site("resid_pre", 0), torch.zeros(lm.d_model), mode="project")
    with pytest.raises(InputError, match="site among"):
        Steer(Site("pattern", 0), vec)
    for bad, field in (({"alphas": (1.0, float("nan"))}, "alphas"), ({"alphas": ()}, "alphas"),
                       ({"layer": -1}, "layer"), ({"mode": "scale"}, "mode")):  # fmt: skip
        with pytest.raises(InputError) as info:  # was pydantic's several lines
            SteerConfig(**bad)
        assert str(info.value).startswith(f"field {field!r}: ") and "\n" not in str(info.value)
    with pytest.raises(InputError, match="at least one contrastive pair"):
        caa_vector(lm, [], Site("resid_pre", 0))
    with pytest.raises(InputError, match=r"shape \[64\]"):
        steer_sweep(lm, torch.ones(3), [SteerPrompt("p", "Hi")], SteerConfig(layer=1))
    prompt = [Prompt(_ids(lm, "Once upon"), seeds=[0])]
    with pytest.raises(UnsupportedInterventionError, match="per-row Steer"):
        eng.generate(
            prompt, Sampling(2), interventions=[Steer(Site("resid_pre", 0), vec, torch.ones(2))]
        )
    with pytest.raises(UnsupportedInterventionError, match="cache"):
        k = Steer(Site("k", 0, head=0), torch.ones(lm.d_head))
        eng.generate(prompt, Sampling(2), interventions=[k])
    one = [SteerPrompt("p", "Hi")]
    calls = []  # the refusals below come before any forward
    handle = lm.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(InputError, match="length 0"):  # was "not finite"
            steer_sweep(lm, torch.zeros(lm.d_model), one, SteerConfig(layer=1, normalize=True))
        with pytest.raises(InputError, match="alpha"):  # 1e30 overflowed the norms: "no effect"
            steer_sweep(lm, torch.ones(lm.d_model), one, SteerConfig(layer=1, alphas=(1e30,)))
        with pytest.raises(UnsupportedInterventionError, match="while generating"):
            config = SteerConfig(site="k", layer=1, head=0, max_new_tokens=2)  # was refused
            steer_sweep(lm, torch.ones(lm.d_head), one, config)  # after the metric sweep
    finally:
        handle.remove()
    assert not calls


def test_run_directory_report_and_round_trip(tmp_path):
    from mechscope.runs import RunDir
    from mechscope.runs.result import load_result, save_result
    from mechscope.steering import SteeringResult, run_steering
    from mechscope.steering.report import steering_section

    lm = load_model("tiny:llama")
    prompts = [
        SteerPrompt("p0", "When Mary and John went", " Mary", " John"),
        SteerPrompt("p1", "Mary"),
    ]
    config = SteerConfig(layer=1, alphas=(-2.0, 2.0), max_new_tokens=3, policy="first")
    run = RunDir.create(tmp_path, "s", {"config": config.model_dump(mode="json")})
    result = run_steering(run, lm, torch.ones(lm.d_model), prompts, config)
    assert (
        list(result.alphas) == [-2.0, 0.0, 2.0] and np.isnan(result.metrics["logit_diff"][1]).all()
    )
    back = SteeringResult.from_run(run)
    np.testing.assert_array_equal(back.metrics["target_prob"], result.metrics["target_prob"])
    assert back.generations == result.generations and len(result.generations[0]) == 3
    save_result(tmp_path / "o", "main", result)
    assert load_result(tmp_path / "o", "main", SteeringResult).to_frame().equals(result.to_frame())
    from mechscope.report.sections import walk

    blocks = steering_section(run)
    names = [getattr(b, "name", None) for b in walk(blocks)]
    assert type(blocks[0]).__name__ == "FindingBlock" and "α = " in blocks[0].content
    assert "steering-logit_diff" in names and "steering-target_prob" in names
