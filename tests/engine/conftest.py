"""Fixtures of the engine's tests.

``causal_model``: ``(lm, Engine)`` for every causal card's tiny model and the real
stories260K; ``resumable_model``: those a resumed pass is checked on, at
:data:`RESUME_SEQ` tokens (a model whose sliding window or chunk is shorter is skipped:
the engine recomputes such sequences instead of resuming them).
"""

from __future__ import annotations

import pytest

from mechscope.engine import Engine
from mechscope.engine.interventions.prefix import can_resume
from mechscope.models import all_cards, load_model

CAUSAL = sorted(f for f, card in all_cards().items() if card.causal)
RESUME_SEQ = 12


@pytest.fixture(scope="module", params=[*(f"tiny:{f}" for f in CAUSAL), "stories"])
def causal_model(request, stories_path):
    """``(lm, Engine)`` for every causal card's tiny model and the real stories260K."""
    spec = str(stories_path) if request.param == "stories" else request.param
    lm = load_model(spec)
    return lm, Engine.of(lm)


@pytest.fixture(scope="module")
def resumable_model(causal_model):
    """:func:`causal_model`, skipping a model that cannot resume :data:`RESUME_SEQ` tokens."""
    if not can_resume(causal_model[0], RESUME_SEQ):
        pytest.skip("a sliding window or chunk shorter than the test sequence")
    return causal_model
