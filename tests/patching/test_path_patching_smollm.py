"""Path patching on smollm2-135m IOI pairs (slow) against the independent hook
implementation (``path_reference``): q, k (key/value heads) and the final residual stream,
MLPs recomputed and frozen.

Tolerance: ``eps(fp32) × max|clean logit| × d_model`` on the logit difference (about 2e-3
here): the rounding of fp32 sums over ``d_model`` terms at the logits' scale, for passes
that pack their rows differently. On CPU the two agree bit for bit.

The senders and receivers are smollm2's IOI heads, found with this code and stated here
as claims the independent implementation checks: 23.3, 23.0 and 29.1 write the answer
straight to the logits (name movers; 23.3 alone carries over a third of the clean →
corrupt drop in every pair), and 20.0 lowers the logit difference through the name
movers' queries (the IOI paper's S-inhibition path: 5% of the drop or more on average).
17.4 and 19.2 are the next senders into the name movers' keys and queries; 0.0 and
10.2 / 10.0 an early sender and receiver.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from path_reference import independent_copy, path_patch_reference, step_one

from mechscope.data.ioi import generate_ioi
from mechscope.data.ioi_pools import TEMPLATES
from mechscope.data.pairs import tokenize_pair
from mechscope.patching.path import path_patch
from tolerance import assert_within, depth_of, rounding_tolerance

pytestmark = pytest.mark.slow

NAME_MOVER, S_INHIBITION = (23, 3), (20, 0)
SENDERS = [(0, 0), (17, 4), (19, 2), S_INHIBITION, NAME_MOVER]
NAME_MOVERS = [(23, 0), NAME_MOVER, (29, 1)]
#: Receiver groups. Key/value heads for k: 3 query heads share one (23.0 reads kv 0,
#: 23.3 kv 1, 29.1 kv 0).
RECEIVERS = {
    "q": [[(10, 2)], [(23, 0)], [(29, 1)], NAME_MOVERS],
    "k": [[(10, 0)], [(23, 1)], [(29, 0)], [(23, 0), (23, 1), (29, 0)]],
}


@pytest.fixture(scope="module")
def ioi(smollm2):
    pairs = generate_ioi(4, seed=0, tokenizer=smollm2.tokenizer, templates=TEMPLATES[:1])
    toks = [tokenize_pair(p, smollm2.tokenizer, policy="error") for p in pairs]
    clean = torch.tensor([t.clean_ids for t in toks])
    corrupt = torch.tensor([t.corrupt_ids for t in toks])
    rows = torch.arange(len(toks))
    correct = torch.tensor([t.correct_id for t in toks])
    wrong = torch.tensor([t.wrong_id for t in toks])
    ref = independent_copy(smollm2)
    with torch.no_grad():
        clean_logits = ref(clean).logits[:, -1].float()  # [P, vocab]
        corrupt_logits = ref(corrupt).logits[:, -1].float()

    def ld(logits: torch.Tensor) -> np.ndarray:  # [P, vocab] -> [P]
        return (logits[rows, correct] - logits[rows, wrong]).numpy()

    return {
        "pairs": pairs,
        "ref": ref,
        "ids": (clean, corrupt),
        "step_one": step_one(ref, clean, corrupt),
        "ld": ld,
        "clean": ld(clean_logits),
        "corrupt": ld(corrupt_logits),
        # a logit difference rounds at the logits' scale, through every layer
        "tol": rounding_tolerance(float(clean_logits.abs().max()), depth_of(smollm2)),
    }


def _reference(ioi, receivers, receiver_input: str, freeze: bool) -> np.ndarray:
    """``[pairs, senders, receivers]`` logit differences of the hook implementation, NaN
    where every receiver of a group sits at or below the sender (no path)."""
    out = np.full((len(ioi["pairs"]), len(SENDERS), len(receivers)), np.nan, np.float32)
    for i, sender in enumerate(SENDERS):
        for j, group in enumerate(receivers):
            if group and all(layer <= sender[0] for layer, _ in group):
                continue
            logits = path_patch_reference(
                ioi["ref"], *ioi["ids"], [sender], group, receiver_input,
                freeze_mlps=freeze, cached=ioi["step_one"],
            )  # fmt: skip
            out[:, i, j] = ioi["ld"](logits)
    return out


@pytest.mark.parametrize(
    ("receiver_input", "freeze"), [("q", False), ("k", False), ("resid_final", False), ("q", True)]
)
def test_smollm2_ioi_paths_equal_the_hook_implementation(smollm2, ioi, receiver_input, freeze):
    receivers = RECEIVERS.get(receiver_input, [])
    got = path_patch(smollm2, ioi["pairs"], SENDERS, receivers, receiver_input, freeze_mlps=freeze)
    want = _reference(ioi, receivers or [[]], receiver_input, freeze)
    tol = ioi["tol"]
    assert_within(got.clean_logit_diff, ioi["clean"], tol, msg="clean")
    assert_within(got.corrupt_logit_diff, ioi["corrupt"], tol, msg="corrupt")
    np.testing.assert_array_equal(np.isnan(got.logit_diff), np.isnan(want))
    assert_within(got.logit_diff, want, tol, msg="paths")

    moved = want - ioi["clean"][:, None, None]  # [pairs, senders, receivers]
    assert np.nanmax(np.abs(moved)) > 10 * tol  # the agreement is not clean vs clean
    drop = ioi["clean"] - ioi["corrupt"]  # [pairs]: what a path effect of -1 takes away
    if receiver_input == "resid_final":  # the name mover's direct path: a third of the drop
        effect = moved[:, SENDERS.index(NAME_MOVER), 0] / drop
        assert (effect < -1 / 3).all(), effect
    if receiver_input == "q":  # S-inhibition into the name movers' queries lowers it
        cell = moved[:, SENDERS.index(S_INHIBITION), receivers.index(NAME_MOVERS)]
        assert (cell / drop).mean() < -0.05, cell / drop
