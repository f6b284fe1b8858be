"""Path patching with features as senders or receivers, against computations that do not
use it: its head-only passes against the independent hook reference, a feature's direct
path to the logits by hand (its decoder row added to the clean final residual, then the
final norm and the unembedding), a head's direct path into a feature by hand (its
``o_proj`` contribution added to the clean residual, then the encoder); refusals."""

from __future__ import annotations

import pytest
import torch
from patching_reference import ioi_like
from path_reference import independent_copy, path_patch_reference

from dictionary_fixtures import random_dictionary
from mechscope.dictionaries import Hook
from mechscope.engine import Engine, Patch, Read, Site
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.patching.path import path_patch
from mechscope.patching.path_features import path_patch_nodes
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of

SEQ = 10


@pytest.fixture(scope="module")
def ids() -> tuple[torch.Tensor, torch.Tensor]:
    """Random clean prompts and corrupt ones differing at two late positions."""
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(10, 300, (3, SEQ), generator=gen)
    corrupt = clean.clone()
    corrupt[:, SEQ - 4] = torch.randint(10, 300, (3,), generator=gen)
    corrupt[1:, SEQ - 2] += 1
    return clean, corrupt


def _logits(logits: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    return logits  # [rows, vocab]: every logit scored


@pytest.mark.parametrize("receiver_input", ["q", "v", "resid_final"])
def test_heads_through_the_feature_passes_match_the_reference(lm, ids, receiver_input):
    clean, corrupt = ids
    senders = [[(0, 1)], [(1, 0), (1, 2)]]
    n = lm.n_heads if receiver_input == "q" else lm.n_kv_heads
    receivers = [[(2, 0)], [(1, n - 1), (2, 1)]]
    got = path_patch_nodes(
        Engine.of(lm), clean, corrupt, senders, receivers, receiver_input, _logits
    )
    ref = independent_copy(lm)
    scale = float(got.clean.abs().max())
    for i, s in enumerate(senders):
        for j, r in enumerate(receivers if receiver_input != "resid_final" else [[]]):
            want = path_patch_reference(ref, clean, corrupt, s, r, receiver_input)
            cell = got.patched[:, i, j]
            assert_rounding_close(cell, want, depth=depth_of(lm), scale=scale, msg=f"{s}→{r}")


def _final(lm, resid: torch.Tensor) -> torch.Tensor:
    """Last-position logits of a final residual stream ``[P, T, d]`` by the model's own
    final norm and unembedding."""
    with torch.no_grad():
        return lm.model.lm_head(lm.model.model.norm(resid))[:, -1]


def test_a_feature_s_direct_path_to_the_logits_by_hand(lm, ids):
    """With the MLPs frozen, a feature at ``resid_post`` 0 reaches the logits only through
    the residual stream: the clean final residual plus its change times its decoder row."""
    clean, corrupt = ids
    d = random_dictionary(lm.d_model, Hook("resid_post", 0), seed=3)
    eng = Engine.of(lm)
    site, last = Site.feature(d), Site("resid_post", lm.n_layers - 1)
    acts = eng.run(torch.cat([clean, corrupt]), [Read(site), Read(last)])
    f = int((acts[site] > 0).sum((0, 1)).argmax())  # active most often
    n = clean.shape[0]
    change = acts[site][n:, :, f] - acts[site][:n, :, f]  # [P, T]
    want = _final(lm, acts[last][:n] + change[..., None] * d.w_dec[f])
    got = path_patch_nodes(
        eng, clean, corrupt, [[Site.feature(d, f)]], [], "resid_final", _logits,
        freeze_mlps=True,
    )  # fmt: skip
    scale = float(want.abs().max())
    assert_rounding_close(got.patched[:, 0, 0], want, depth=depth_of(lm), scale=scale)
    plain = _final(lm, acts[last][:n])
    assert_beyond_rounding(got.patched[:, 0, 0], plain, depth=depth_of(lm), scale=scale)


def test_path_patch_takes_features_and_labels_them(lm, ids):
    """The public entry: features beside heads, labelled by their site and index."""
    d = random_dictionary(lm.d_model, Hook("resid_pre", 2), seed=5)
    e = random_dictionary(lm.d_model, Hook("resid_post", 2), seed=6)
    pair = ioi_like("p0", "Mary", "John", "Mary", "store")
    res = path_patch(
        lm, [pair], [(0, 1), [Site.feature(e, 3)]], [[Site.feature(d, 4)], (2, 0)], "q",
        progress=False,
    )  # fmt: skip
    assert res.senders == ["0.1", "resid_post.2:f3"]
    assert res.receivers == ["resid_pre.2:f4", "2.0"]
    frame = res.to_frame()
    assert set(frame["sender"]) == {"0.1"}  # the feature sender: no receiver reads after it


def test_a_head_s_direct_path_into_a_feature_by_hand(lm, ids):
    """Head (0, 1) into a feature reading ``resid_pre`` 2, MLPs frozen: the feature's input
    is the clean residual plus the head's corrupt-minus-clean ``z`` through its slice of
    ``o_proj``; pass 3 sets the feature to its encoding (a plain ``Patch``)."""
    clean, corrupt = ids
    d = random_dictionary(lm.d_model, Hook("resid_pre", 2), seed=5)
    eng = Engine.of(lm)
    z, pre = Site("z", 0), Site("resid_pre", 2)
    one = eng.run(torch.cat([clean, corrupt]), [Read(z), Read(pre)])
    n, h = clean.shape[0], 1
    dz = (one[z][n:, :, h] - one[z][:n, :, h]).detach()  # [P, T, d_head]
    w_o = lm.model.model.layers[0].self_attn.o_proj.weight[:, h * lm.d_head : (h + 1) * lm.d_head]
    with torch.no_grad():
        acts = d.encode(one[pre][:n] + dz @ w_o.T)  # [P, T, d_sae]
    f = int((acts > 0).sum((0, 1)).argmax())
    want = eng.run(clean, [Patch(Site.feature(d, f), acts[..., f])]).logits[:, -1]
    got = path_patch_nodes(
        eng, clean, corrupt, [[(0, h)]], [[Site.feature(d, f)], [(0, 0)]], "q", _logits,
        freeze_mlps=True,
    )  # fmt: skip
    scale = float(want.abs().max())
    assert_rounding_close(got.patched[:, 0, 0], want, depth=depth_of(lm), scale=scale)
    assert torch.isnan(got.patched[:, 0, 1]).all()  # a head of the sender's layer: no path
    assert_beyond_rounding(want, got.clean, depth=depth_of(lm), scale=scale)


def test_what_is_not_one_exact_path_is_refused(lm, ids):
    clean, corrupt = ids
    d = random_dictionary(lm.d_model, Hook("resid_post", 0))
    eng = Engine.of(lm)
    with pytest.raises(UnsupportedInterventionError, match="of a sender's dictionary"):
        path_patch_nodes(eng, clean, corrupt, [[Site.feature(d, 1)]], [[Site.feature(d, 2)]],
                         "q", _logits)  # fmt: skip
    with pytest.raises(InputError, match="one feature per node"):
        path_patch_nodes(eng, clean, corrupt, [[Site.feature(d, (1, 2))]], [], "resid_final",
                         _logits)  # fmt: skip
    with pytest.raises(InputError, match=r"features 0\.\.47, got 60"):
        path_patch_nodes(eng, clean, corrupt, [[Site.feature(d, 60)]], [], "resid_final", _logits)
