"""contrastive_difference and causal_effect against the plain-hook recipe of the RCID plan."""

from __future__ import annotations

import pytest
import torch
from patching_reference import read_site, run_hooked

from mechscope.errors import InputError
from mechscope.patching import causal_effect, contrastive_difference


@pytest.fixture(scope="module")
def batch(lm, same_pair):
    tok = lm.tokenizer
    clean = tok([same_pair.clean, same_pair.clean.replace("Mary", "John", 1)]).input_ids
    corrupt = tok([same_pair.corrupt, same_pair.corrupt.replace("Mary", "John", 1)]).input_ids
    assert len({len(x) for x in clean + corrupt}) == 1
    correct = tok(" Mary", add_special_tokens=False).input_ids[0]
    wrong = tok(" John", add_special_tokens=False).input_ids[0]
    return torch.tensor(clean), torch.tensor(corrupt), correct, wrong


@pytest.mark.parametrize("layer", [0, 2])
def test_contrastive_difference(lm, batch, layer):
    clean, corrupt, _, _ = batch
    pos = torch.tensor([14, 20])
    d = contrastive_difference(lm, clean, corrupt, layer, pos)
    for r in range(2):
        h_c = read_site(lm.model, clean[r].tolist(), "resid_post", layer)[pos[r]]
        h_k = read_site(lm.model, corrupt[r].tolist(), "resid_post", layer)[pos[r]]
        torch.testing.assert_close(d[r], h_c - h_k, atol=1e-6, rtol=0)


@pytest.mark.parametrize("layer", [0, 1])
def test_causal_effect(lm, batch, layer):
    clean, corrupt, correct, wrong = batch
    pos, answer = 14, clean.shape[1] - 1
    got = causal_effect(
        lm,
        clean,
        corrupt,
        layer,
        pos,
        answer,
        torch.tensor([correct] * 2),
        torch.tensor([wrong] * 2),
    )
    for r in range(2):
        value = read_site(lm.model, corrupt[r].tolist(), "resid_post", layer)[pos]

        def write(x, v=value):
            x = x.clone()
            x[0, pos] = v
            return x

        orig = run_hooked(lm.model, clean[r].tolist(), [])[answer]
        patched = run_hooked(lm.model, clean[r].tolist(), [("resid_post", layer, write)])[answer]
        expected = (orig[correct] - orig[wrong]) - (patched[correct] - patched[wrong])
        assert float(got[r]) == pytest.approx(float(expected), abs=1e-5)


def test_positions_are_checked(lm, batch):
    clean, corrupt, _, _ = batch
    with pytest.raises(InputError, match="row 1"):
        contrastive_difference(lm, clean, corrupt, 0, torch.tensor([3, 99]))
    with pytest.raises(InputError, match="2 positions"):
        contrastive_difference(lm, clean, corrupt, 0, torch.tensor([1, 2, 3]))
