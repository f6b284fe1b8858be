"""A layer that calls the attention function twice per pass (DiffLlama's differential
attention) has no single q/k/v or pattern: the engine refuses those sites in one line
instead of keeping whichever call came last."""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of


def test_differential_attention_sites_are_refused_and_the_rest_works() -> None:
    lm = load_model("tiny:diffllama")
    eng = Engine.of(lm)  # the probe finds it and records the refusal
    assert {"q", "k", "v", "pattern", "SuppressAttention"} <= set(lm.refused)
    ids = torch.randint(10, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    with pytest.raises(UnsupportedInterventionError, match="more than once per pass") as info:
        lm.refused.clear()  # without the record, the guard inside the pass still refuses
        eng.run(ids, [Read(Site("v", 1))])
    assert "\n" not in str(info.value)
    site = Site("resid_post", 1)  # sites outside attention are unaffected
    value = eng.run(ids, [Read(site)])[site]
    patched, plain = eng.run(ids, [Patch(site, value)]).logits, eng.run(ids).logits
    assert_rounding_close(patched, plain, depth=depth_of(lm), msg="self-patch")
