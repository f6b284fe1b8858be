"""The engine conformance checks (tests/engine/test_conformance.py) on the real Gemma 3 270M.

The tiny gemma3 model proves the card's paths; the real one adds what a few random layers do
not have: interleaved sliding-window and global layers, query_pre_attn_scalar, a 262k
vocabulary, one key/value head, and the post-norms that are Gemma's attn_out / mlp_out.
The checks themselves live in test_conformance.py (CHECKS); only the model differs here.
"""

from __future__ import annotations

import pytest
from test_conformance import CHECKS, _ids

from mechscope.engine import Engine

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_gemma3_conformance(gemma3, check) -> None:
    eng = Engine.of(gemma3)
    check(gemma3, eng, _ids(gemma3, seq=10, batch=1))
