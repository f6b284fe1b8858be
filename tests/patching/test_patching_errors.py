"""Bad input fails before any forward, in one line naming the pair and the field."""

from __future__ import annotations

import pytest
from patching_reference import ioi_like

from mechscope.errors import InputError
from mechscope.patching import PatchSpec, patch_pairs


def _one_line(err: pytest.ExceptionInfo, pair_id: str, field: str) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    assert f"sample {pair_id!r}" in msg and f"field {field!r}" in msg
    return msg


def test_different_lengths_need_spans(lm, diff_pair):
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [diff_pair], PatchSpec(granularity="position"), progress=False)
    msg = _one_line(err, "diff-1", "corrupt")
    assert "same token length" in msg and "span" in msg


def test_spans_of_different_token_counts_cannot_align(lm):
    pair = ioi_like("bad-span", "Mary", "John", "Lily", "store")  # ' Lily' is 3 tokens here
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [pair], PatchSpec(granularity="span"), progress=False)
    assert "as many tokens" in _one_line(err, "bad-span", "spans.S2")


def test_unknown_span_name(lm, same_pair):
    with pytest.raises(InputError) as err:
        patch_pairs(
            lm, [same_pair], PatchSpec(granularity="span", spans=("subject",)), progress=False
        )
    _one_line(err, "same-1", "spans")


def test_multi_token_target_with_policy(lm):
    pair = ioi_like("multi", "Mary", "John", "Mary", "store", correct=" drink")  # 3 tokens
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [pair], PatchSpec(policy="error"), progress=False)
    assert "single token" in _one_line(err, "multi", "correct")
    res = patch_pairs(lm, [pair], PatchSpec(policy="first", layers=(0,)), progress=False)
    first = lm.tokenizer(pair.clean + " drink").input_ids[len(lm.tokenizer(pair.clean).input_ids)]
    assert int(res.pairs[0].baseline["correct_id"]) == first


def test_position_out_of_range(lm, same_pair):
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [same_pair], PatchSpec(positions=(0, 40)), progress=False)
    assert "40" in _one_line(err, "same-1", "positions")


def test_candidates_must_be_single_tokens_and_hold_the_answers(lm, same_pair):
    with pytest.raises(InputError) as err:
        patch_pairs(lm, [same_pair], PatchSpec(candidates=(" Mary", " the")), progress=False)
    _one_line(err, "same-1", "candidates")
    with pytest.raises(InputError) as err:
        patch_pairs(
            lm, [same_pair], PatchSpec(candidates=(" Mary", " John", " drink")), progress=False
        )
    _one_line(err, "same-1", "candidates")


def test_duplicate_pair_ids(lm, same_pair):
    with pytest.raises(InputError, match="unique"):
        patch_pairs(lm, [same_pair, same_pair], PatchSpec(), progress=False)


def test_bad_spec_values():
    with pytest.raises(ValueError, match="resid_pre"):
        PatchSpec(site="pattern")
    with pytest.raises(ValueError):
        PatchSpec(directions=())
