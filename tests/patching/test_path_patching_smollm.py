"""Path patching on smollm2-135m IOI pairs (slow) against the independent hook
implementation (``path_reference``): q, k (key/value heads) and the final residual
stream, MLPs recomputed and frozen."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from path_reference import independent_copy, path_patch_reference

from mechscope.data.ioi import generate_ioi
from mechscope.data.ioi_pools import TEMPLATES
from mechscope.data.pairs import tokenize_pair
from mechscope.patching.path import path_patch

pytestmark = pytest.mark.slow

SENDERS = [(0, 0), (9, 6), (15, 2), (20, 3), (23, 3)]
#: 23.3, 23.0 and 29.1 are smollm2's strongest direct paths to the IOI logit difference
#: (name movers); k and v receivers are key/value heads (23.1 holds query heads 3-5).
RECEIVERS = {"q": [(10, 2), (23, 0), (29, 1), (29, 8)], "k": [(10, 0), (23, 1), (29, 0)]}


@pytest.fixture(scope="module")
def ioi(smollm2):
    pairs = generate_ioi(4, seed=0, tokenizer=smollm2.tokenizer, templates=TEMPLATES[:1])
    toks = [tokenize_pair(p, smollm2.tokenizer, policy="error") for p in pairs]
    clean = torch.tensor([t.clean_ids for t in toks])
    corrupt = torch.tensor([t.corrupt_ids for t in toks])
    rows = torch.arange(len(toks))
    correct = torch.tensor([t.correct_id for t in toks])
    wrong = torch.tensor([t.wrong_id for t in toks])
    return pairs, clean, corrupt, lambda logits: logits[rows, correct] - logits[rows, wrong]


@pytest.mark.parametrize(
    ("receiver_input", "freeze"), [("q", False), ("k", False), ("resid_final", False), ("q", True)]
)
def test_smollm2_ioi_paths_equal_the_hook_implementation(smollm2, ioi, receiver_input, freeze):
    pairs, clean, corrupt, ld = ioi
    receivers = RECEIVERS.get(receiver_input, [])
    got = path_patch(smollm2, pairs, SENDERS, receivers, receiver_input, freeze_mlps=freeze)
    ref = independent_copy(smollm2)
    with torch.no_grad():
        scale = float(ref(clean).logits[:, -1].abs().max())
    tol = torch.finfo(torch.float32).eps * scale * smollm2.d_model  # fp32 at the logits' scale
    want = np.full(got.logit_diff.shape, np.nan, dtype=np.float32)
    for i, s in enumerate(SENDERS):
        for j, r in enumerate(receivers or [None]):
            if r is not None and r[0] <= s[0]:
                continue
            logits = path_patch_reference(
                ref, clean, corrupt, [s], [r] if r else [], receiver_input, freeze_mlps=freeze
            )
            want[:, i, j] = ld(logits).numpy()
    np.testing.assert_array_equal(np.isnan(got.logit_diff), np.isnan(want))
    np.testing.assert_allclose(got.logit_diff, want, atol=tol, rtol=0)
    moved = np.nanmax(np.abs(want - got.clean_logit_diff[:, None, None]))
    assert moved > 10 * tol  # the paths move the logit difference past the tolerance
