"""Pairs given as token ids: the same ids patch to the same grid as their text, and every
value that cannot be patched is refused in one line naming the pair and field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_patching_exact import assert_grid_matches, loop_reference

from mechscope.data.pairs import tokenize_pair
from mechscope.errors import InputError
from mechscope.patching import PatchSpec, patch_pairs
from mechscope.patching.prepare import prepare_pair


@pytest.fixture(scope="module")
def token_pair(lm, same_pair):
    return tokenize_pair(same_pair, lm.tokenizer, policy="error")


def test_ids_are_patched_as_given(lm, same_pair, token_pair) -> None:
    spec = PatchSpec(site="resid_pre", directions=("denoising", "noising"))
    for direction in spec.directions:
        text = prepare_pair(same_pair, lm.tokenizer, direction, spec)
        base = token_pair.corrupt_ids if direction == "denoising" else token_pair.clean_ids
        assert text.base_ids == list(base)  # the text encodes to the ids handed over
    got = patch_pairs(lm, [token_pair], spec, progress=False)
    for k, direction in enumerate(spec.directions):
        ref, scale = loop_reference(lm, same_pair, spec, direction)
        assert_grid_matches(lm, got.pairs[k], ref, scale, where=f"{direction}: ")
    from_text = patch_pairs(lm, [same_pair], spec, progress=False)
    for a, b in zip(got.pairs, from_text.pairs, strict=True):
        np.testing.assert_array_equal(a.metrics["logit_diff"], b.metrics["logit_diff"])


def test_a_position_subset_of_ids(lm, token_pair) -> None:
    spec = PatchSpec(site="resid_pre", layers=(0,), positions=(1, 3))
    got = patch_pairs(lm, [token_pair], spec, progress=False).pairs[0]
    assert got.metrics["logit_diff"].shape == (1, 2, 1)


@pytest.mark.parametrize(
    ("change", "spec", "field"),
    [
        ({}, {"granularity": "span", "spans": ("S2",)}, "granularity"),
        ({}, {"candidates": (" Mary", " John")}, "candidates"),
        ({"clean_ids": [1, 10**7]}, {}, "clean_ids"),
        ({"corrupt_ids": []}, {}, "corrupt_ids"),
        ({"answer_pos": (0, 0)}, {}, "answer_pos"),
        ({"wrong_id": -1}, {}, "wrong_id"),
    ],
)
def test_what_ids_cannot_carry_is_refused(lm, token_pair, change, spec, field) -> None:
    pair = dataclasses.replace(token_pair, **change)
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [pair], PatchSpec(site="resid_pre", **spec), progress=False)
    assert err.value.field == field and err.value.sample == pair.id
    assert "\n" not in str(err.value)
