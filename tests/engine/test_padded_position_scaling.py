"""Left padding where a model scales attention by absolute token indices: exact below the
length where the scale starts, refused in one line from there.

Llama 4's NoPE layers multiply their queries by ``log1p(floor((i + 1) / floor_scale)) ·
attn_scale + 1`` at index ``i`` of the sequence, padding included, so a left-padded row of a
long enough batch sees another temperature than it does alone (off by 0.012 in the logits
on a small ``floor_scale``). The real ``floor_scale`` is 8,192; the tiny model's is 16, so
both sides of it are a few tokens long.
"""

from __future__ import annotations

import pytest

from mechscope.engine import Engine
from mechscope.engine.core.spans import absolute_position_scaling
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import load_model, tiny_types
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of

LONG = "When Mary and John went to the store, John gave a drink to"  # 22 tiny tokens
SHORT = ["Once upon a time", "The Eiffel Tower"]


@pytest.fixture
def llama4(monkeypatch):
    monkeypatch.setitem(tiny_types._overrides(), "llama4_text", {"floor_scale": 16})
    lm = load_model("tiny:llama4_text")
    assert absolute_position_scaling(lm.config) == 16
    return lm, Engine.of(lm)


def _alone_and_padded(eng, prompts):
    padded = eng.run_with_cache(prompts, ["resid_post"])
    for i, prompt in enumerate(prompts):
        alone = eng.run_with_cache([prompt], ["resid_post"]).logits[0]
        yield padded.logits[i, -alone.shape[0] :], alone


def test_a_padded_batch_shorter_than_the_scale_is_exact(llama4) -> None:
    lm, eng = llama4
    prompts = [SHORT[0], SHORT[0] + " there"]
    assert eng.run_with_cache(prompts, ["resid_post"]).tokens.ids.shape[1] < 16
    for row, alone in _alone_and_padded(eng, prompts):
        assert_rounding_close(row, alone, depth=depth_of(lm), msg="padded row vs alone")


def test_left_padding_past_the_scale_is_refused_in_one_line(llama4, monkeypatch) -> None:
    lm, eng = llama4
    with pytest.raises(UnsupportedInterventionError, match="left padding") as info:
        eng.run_with_cache([LONG, SHORT[0]])
    assert "\n" not in str(info.value) and "absolute token indices" in str(info.value)
    eng.run_with_cache([LONG, LONG])  # no padding: nothing shifts
    monkeypatch.setattr(
        "mechscope.engine.interventions.checks.absolute_position_scaling", lambda config: None
    )
    padded, alone = list(_alone_and_padded(eng, [LONG, SHORT[0]]))[1]  # what it prevents
    assert_beyond_rounding(padded, alone, depth=depth_of(lm), msg="padded past the scale")


def test_other_families_read_no_absolute_scaling() -> None:
    for model_type in ("llama", "gemma3_text", "mistral"):
        assert absolute_position_scaling(load_model(f"tiny:{model_type}").config) is None
