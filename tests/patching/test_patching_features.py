"""Patching a dictionary's features: the sweep equals a plain loop of ``Engine.run`` with
one ``Patch`` on the feature site per forward, attribution patching is exact where the
metric is linear in the features, the top-k choice is the clean runs' most active
features, and the results, figures, run directory and command line name features.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from patching_reference import ioi_like, metric_scale, ref_metrics
from test_patching_exact import assert_grid_matches

from dictionary_fixtures import N_FEATURES, random_dictionary
from mechscope.cli.errors import run_app
from mechscope.dictionaries import Hook, save_saelens
from mechscope.engine import Ablate, Engine, Patch, Read, Site
from mechscope.errors import InputError
from mechscope.patching import PatchSpec, patch_pairs, run_patching
from mechscope.patching.cli import app
from mechscope.patching.figures import attribution_scatter, feature_heatmap
from mechscope.patching.prepare import prepare_pair, units
from mechscope.patching.report import sweep_figures
from mechscope.runs import RunDir, read_table
from tolerance import assert_rounding_close, depth_of


@pytest.fixture(scope="module")
def sae(lm):
    return random_dictionary(lm.d_model, Hook("resid_post", 1))


@pytest.fixture(scope="module")
def transcoder(lm):
    return random_dictionary(lm.d_model, Hook("mlp_in", 0), Hook("mlp_out", 0), seed=2)


def feature_loop(lm, pair, spec, direction, d, features):
    """Every (position, feature) cell with one ``Engine.run`` each: the feature's source
    value written at the unit's positions; metrics in float64, and the largest |logit|."""
    eng = Engine.of(lm)
    p = prepare_pair(pair, lm.tokenizer, direction, spec)
    _, _, base_pos, src_pos = units(p, spec)
    site = Site.feature(d)
    src = eng.run(torch.tensor([p.source_ids]), [Read(site)])[site]  # [1, seq, d_sae]
    base_logits = eng.run(torch.tensor([p.base_ids])).logits[0, -1].double().numpy()
    out, scale = {}, float(np.abs(base_logits).max())
    for u, (bp, sp) in enumerate(zip(base_pos, src_pos, strict=True)):
        for j, f in enumerate(features):
            one = Site.feature(d, f, positions=tuple(bp))
            patch = Patch(one, src[:, list(sp), f])  # [1, P]
            logits = eng.run(torch.tensor([p.base_ids]), [patch]).logits[0, -1].double().numpy()
            out[(0, u, j)] = ref_metrics(logits, base_logits, p.correct_id, p.wrong_id, p.target_id)
            scale = max(scale, float(np.abs(logits).max()))
    return out, scale


@pytest.mark.parametrize("which", ["sae", "transcoder"])
def test_the_sweep_equals_a_loop_of_single_patches(lm, same_pair, sae, transcoder, which):
    d = sae if which == "sae" else transcoder
    spec = PatchSpec(site="feature", directions=("denoising", "noising"), features=(0, 5, 17))
    result = patch_pairs(lm, [same_pair], spec, dictionary=d, progress=False)
    for res in result.pairs:
        assert res.layers == [d.config.hook_in.layer] and res.heads == [0, 5, 17]
        assert bool(res.exact_change("logit_diff").abs().max() > 0), "the patches change it"
        ref, scale = feature_loop(lm, same_pair, spec, res.direction, d, res.heads)
        assert_grid_matches(lm, res, ref, scale, where=f"{which} {res.direction}: ")
    assert "feature" in result.to_frame().columns and "head" not in result.to_frame().columns


def test_ablating_a_feature_is_patching_in_zero(lm, sae):
    """A pair whose source has feature ``f`` off at a position: the sweep's cell there is the
    zero ablation of ``f`` at that position (``Ablate`` on the feature site)."""
    eng = Engine.of(lm)
    pair = ioi_like("abl", "Mary", "John", "Mary", "store")
    spec = PatchSpec(site="feature", features=tuple(range(N_FEATURES)))
    res = patch_pairs(lm, [pair], spec, dictionary=sae, progress=False).pairs[0]
    p = prepare_pair(pair, lm.tokenizer, "denoising", spec)
    site = Site.feature(sae)
    src = eng.run(torch.tensor([p.source_ids]), [Read(site)])[site][0]  # [seq, d_sae]
    base = eng.run(torch.tensor([p.base_ids]), [Read(site)])[site][0]
    off = ((src == 0) & (base > 0)).nonzero().tolist()  # [(position, feature)]
    assert off, "the random dictionary has a feature on in the base and off in the source"
    q, f = off[0]
    ablated = Ablate(Site.feature(sae, f, positions=(q,)))
    logits = eng.run(torch.tensor([p.base_ids]), [ablated]).logits[0, -1].double()
    want = float(logits[p.correct_id] - logits[p.wrong_id])
    scale = metric_scale("logit_diff", float(logits.abs().max()), lm.vocab_size)
    assert_rounding_close(
        res.metrics["logit_diff"][0, q, f], want, depth=depth_of(lm), scale=scale, msg="ablate"
    )


def test_top_features_are_the_most_active_on_the_clean_prompts(lm, sae):
    eng = Engine.of(lm)
    pairs = [
        ioi_like("t0", "Mary", "John", "Mary", "store"),
        ioi_like("t1", "John", "Mary", "John", "park"),
    ]
    spec = PatchSpec(site="feature", top_features=5, directions=("denoising",))
    result = patch_pairs(lm, pairs, spec, dictionary=sae, progress=False)
    site = Site.feature(sae)
    peaks = [
        eng.run(torch.tensor([lm.tokenizer(p.clean).input_ids]), [Read(site)])[site][0]
        .max(0)
        .values
        for p in pairs
    ]  # [d_sae] per clean prompt
    score = torch.stack(peaks).mean(0)
    want = sorted(range(N_FEATURES), key=lambda f: (-float(score[f]), f))[:5]
    assert all(r.heads == want for r in result.pairs)


def test_attribution_is_exact_on_a_linear_model(linear_lm, same_pair):
    """Downstream of a splice the linear model is linear in the features, so the gradient
    × difference is the exact change, up to rounding."""
    sae = random_dictionary(linear_lm.d_model, Hook("resid_post", 0), seed=4)
    spec = PatchSpec(
        site="feature",
        directions=("denoising", "noising"),
        attribution=True,
        top_features=6,
    )
    result = patch_pairs(
        linear_lm, [same_pair], spec, dictionary=sae, keep_logits=True, progress=False
    )
    for res in result.pairs:
        exact = res.exact_change("logit_diff")
        assert float(np.abs(exact).max()) > 1e-3  # real effects to estimate
        top = float(np.abs(res.logits).max())
        scale = 2 * metric_scale("logit_diff", top, linear_lm.vocab_size)
        assert_rounding_close(
            res.attribution, exact, depth=depth_of(linear_lm), scale=scale, msg=res.direction
        )


def test_refusals_name_the_feature_axis(lm, same_pair, sae):
    with pytest.raises(ValueError, match="site 'feature' only"):
        PatchSpec(site="resid_pre", features=(1,))
    with pytest.raises(ValueError, match="not both"):
        PatchSpec(site="feature", features=(1,), top_features=3)
    with pytest.raises(InputError, match="a dictionary for site 'feature'"):
        patch_pairs(lm, [same_pair], PatchSpec(site="feature"), progress=False)
    with pytest.raises(InputError, match=r"feature indices in 0\.\.47, got feature 48"):
        patch_pairs(lm, [same_pair], PatchSpec(site="feature", features=(48,)), dictionary=sae)


def test_figures_report_and_run_dir_name_features(lm, same_pair, sae, tmp_path):
    spec = PatchSpec(site="feature", features=(2, 7), attribution=True)
    run = RunDir.create(tmp_path, "r", {"spec": spec.model_dump(mode="json")})
    result = run_patching(run, lm, [same_pair], spec, dictionary=sae)
    table = read_table(run, "patching")
    assert sorted(set(table["feature"])) == [2, 7]
    assert read_table(run, "patching_spec")["feature_site"][0] == "feature[resid_post.1]"
    fig = feature_heatmap(result)
    assert "feature" in fig.title
    assert attribution_scatter(result) is not None
    names = [b.name for b in sweep_figures(result, "patching")]
    assert names == ["patching-denoising-features", "patching-denoising-attribution-vs-exact"]


def test_cli_patches_a_dictionary_folder(lm, same_pair, sae, tmp_path):
    folder = save_saelens(sae, tmp_path / "sae")
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(same_pair.to_dict()) + "\n")
    out = tmp_path / "runs" / "cli"
    argv = ["run", "--pairs", str(path), "--model", "tiny:llama", "--site", "feature"]
    run_app(app, [*argv, "--dictionary", str(folder), "--features", "top:3", "--out", str(out)])
    table = read_table(RunDir.open(out), "patching")
    assert table["feature"].nunique() == 3 and set(table["layer"]) == {1}
    assert (out / "report.html").is_file()
