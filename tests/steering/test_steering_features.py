"""Steering with a dictionary's feature: the decoder row as the direction is ``Steer``
with that vector (and raising the feature by alpha), clamping equals a ``Patch`` of the
feature site at every position, in the metrics and in greedy generations; refusals name
what cannot be steered."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from dictionary_fixtures import random_dictionary
from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.dictionaries import CrossLayerTranscoder, DictionaryConfig, Hook, save_saelens
from mechscope.engine import Engine, Patch, Site, Steer
from mechscope.engine.interventions.feature_edits import feature_direction
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models import load_model
from mechscope.runs import RunDir, read_table
from mechscope.steering import SteerConfig, steer_sweep
from mechscope.steering.samples import SteerPrompt
from tolerance import assert_rounding_close, depth_of

PROMPTS = ["When Mary and John went to the store", "Once upon a time, there was"]
ALPHAS = (-3.0, 0.0, 2.0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


@pytest.fixture(scope="module")
def prompts():
    return [SteerPrompt(f"p{i}", p, " the", " a") for i, p in enumerate(PROMPTS)]


def _logit_diffs(lm, prompts, interventions) -> torch.Tensor:
    """``[prompts]``: the logit difference of each prompt in one plain ``Engine.run``, and
    the largest |logit| it was read from."""
    eng, out, top = Engine.of(lm), [], 0.0
    target, versus = (
        lm.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" the", " a")
    )
    for p in prompts:
        ids = torch.tensor([lm.tokenizer(p.prompt)["input_ids"]])
        logits = eng.run(ids, interventions).logits[0, -1].float()
        out.append(float(logits[target] - logits[versus]))
        top = max(top, float(logits.abs().max()))
    return torch.tensor(out), top


@pytest.mark.parametrize("which", ["sae", "transcoder", "scaled"])
def test_a_decoder_row_is_steer_with_that_vector(lm, prompts, which):
    if which == "transcoder":
        d = random_dictionary(lm.d_model, Hook("mlp_in", 0), Hook("mlp_out", 0), seed=2)
        site = Site("mlp_out", 0)
    else:
        d = random_dictionary(lm.d_model, Hook("resid_post", 1))
        site = Site("resid_post", 1)
    if which == "scaled":
        d.config = replace(d.config, input_scale=4.0)
    f = 5
    config = SteerConfig(feature=f, alphas=ALPHAS, max_new_tokens=0)
    result = steer_sweep(lm, None, prompts, config, progress=False, dictionary=d)
    assert (result.site, result.layer, result.feature) == (site.name, site.layer, f)
    row = d.w_dec[f] / (d.config.input_scale or 1.0)
    assert_rounding_close(result.vector, row, depth=1, msg="the decoder row")
    for j, alpha in enumerate(ALPHAS):
        want, top = _logit_diffs(lm, prompts, [Steer(site, row, alpha)])
        got = result.metrics["logit_diff"][:, j]
        assert_rounding_close(got, want, depth=depth_of(lm), scale=2 * top, msg=f"α {alpha}")
        raised, _ = _logit_diffs(lm, prompts, [Steer(Site.feature(d, f), torch.tensor(1.0), alpha)])
        assert_rounding_close(got, raised, depth=depth_of(lm), scale=2 * top, msg=f"raised {alpha}")
    assert bool((result.change("logit_diff").abs() > 0).any()), "the steering moves the metric"


def test_clamping_is_a_patch_of_the_feature_at_every_position(lm, prompts):
    d = random_dictionary(lm.d_model, Hook("resid_post", 1))
    f = 3
    config = SteerConfig(feature=f, mode="clamp", alphas=ALPHAS, max_new_tokens=3)
    result = steer_sweep(lm, None, prompts, config, progress=False, dictionary=d)
    assert (result.site, result.layer, result.mode) == ("feature", 1, "clamp")
    eng = Engine.of(lm)
    for j, alpha in enumerate(result.alphas.tolist()):

        def clamp(ids: torch.Tensor, alpha=alpha) -> list:
            return [Patch(Site.feature(d, f), torch.full(ids.shape, alpha))]

        prompt_ids = [torch.tensor([lm.tokenizer(p.prompt)["input_ids"]]) for p in prompts]
        want, top = [], 0.0
        for p, ids in zip(prompts, prompt_ids, strict=True):
            diff, scale = _logit_diffs(lm, [p], clamp(ids))
            want.append(diff)
            top = max(top, scale)
        got = result.metrics["logit_diff"][:, j]
        assert_rounding_close(
            got, torch.cat(want), depth=depth_of(lm), scale=2 * top, msg=f"{alpha}"
        )
        for i, ids in enumerate(prompt_ids):  # greedy decoding, every step a full patched pass
            for _ in range(3):
                logits = eng.run(ids, clamp(ids)).logits[0, -1]
                ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
            text = lm.tokenizer.decode(ids[0, -3:])
            assert result.generations[i][j] == text, (alpha, i)


def test_refusals_name_what_cannot_be_steered(lm, prompts):
    d = random_dictionary(lm.d_model, Hook("resid_post", 1))
    with pytest.raises(InputError, match="clamps a feature"):
        SteerConfig(mode="clamp")
    with pytest.raises(InputError, match="no site with feature"):
        SteerConfig(feature=1, site="resid_pre")
    with pytest.raises(InputError, match="no vector with feature"):
        steer_sweep(lm, torch.ones(lm.d_model), prompts, SteerConfig(feature=1), dictionary=d)
    with pytest.raises(InputError, match="a dictionary for feature"):
        steer_sweep(lm, None, prompts, SteerConfig(feature=1))
    with pytest.raises(InputError, match="a feature in 0"):
        steer_sweep(lm, None, prompts, SteerConfig(feature=99), dictionary=d)
    n, width = lm.n_layers, lm.d_model
    g = torch.Generator().manual_seed(1)
    clt = CrossLayerTranscoder(
        torch.randn(n, width, 8, generator=g), torch.zeros(n, 8),
        [torch.randn(8, n - i, width, generator=g) for i in range(n)], torch.zeros(n, width),
        DictionaryConfig("relu", kind="cross_layer_transcoder", hook_in=Hook("resid_mid", None),
                         hook_out=Hook("mlp_out", None)),
    ).requires_grad_(False)  # fmt: skip
    with pytest.raises(UnsupportedInterventionError, match="writes to 3 layers"):
        feature_direction(lm, clt.source(0), 1)


def test_cli_steers_a_feature_of_a_dictionary_folder(lm, prompts, tmp_path):
    d = random_dictionary(lm.d_model, Hook("resid_post", 1))
    folder = save_saelens(d, tmp_path / "sae")
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"id": p.id, "prompt": p.prompt, "target": p.target, "versus": p.versus} for p in prompts
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    argv = ["steer", "sweep", "--prompts", str(path), "--model", "tiny:llama", "--out", str(out)]
    run_app(app, [*argv, "--dictionary", str(folder), "--feature", "4", "--max-new-tokens", "2"])
    table = read_table(RunDir.open(out), "steering")
    assert len(table) == len(prompts) * 7 and (out / "report.html").is_file()
