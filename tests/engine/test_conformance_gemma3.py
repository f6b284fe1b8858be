"""The engine conformance checks (tests/engine/test_conformance.py) on the real Gemma 3 270M.

The tiny gemma3 model proves the card's paths; the real one adds what a few random layers do
not have: interleaved sliding-window and global layers, query_pre_attn_scalar, a 262k
vocabulary, one key/value head, and the post-norms that are Gemma's attn_out / mlp_out.
The checks themselves live in test_conformance.py (CHECKS); only the model differs here.

Its logits reach ~90, where one fp32 step is 7.6e-6: 18 layers of sums taken in another
order (another CPU's BLAS) move them by tens of steps. The checks allow what rounding
explains at that scale and depth (tests/tolerance.py), and the mistakes of
test_tolerance_power.py (a suppressed span one key off, a gate on the neighbouring head)
must still fail them, and the probe, here too.
"""

from __future__ import annotations

import pytest
import test_conformance
from test_conformance import CHECKS, _ids, check_gates, check_suppression_mask
from test_tolerance_power import MASK_MUTANTS, neighbour_head, wrong_span

from mechscope.engine import Engine
from mechscope.engine.conformance import probe, probe_attention
from mechscope.models.trace import probe_ids

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_gemma3_conformance(gemma3, check) -> None:
    eng = Engine.of(gemma3)
    check(gemma3, eng, _ids(gemma3, seq=10, batch=1))


#: name: (what is replaced, by what, the conformance check and what it names, the probe's
#: module and check)
MISTAKES = {
    **{
        f"mask {name}": (
            "SuppressAttention",
            wrong_span(move),
            check_suppression_mask,
            "suppression vs 4-D mask",
            probe_attention,
            probe_attention.check_suppression,
        )
        for name, move in MASK_MUTANTS.items()
    },
    "gate on the neighbouring head": (
        "Gate",
        neighbour_head,
        check_gates,
        "gate 0 on head ",
        probe,
        probe.check_gate,
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_gemma3_catches_a_mistake(gemma3, mistake, monkeypatch) -> None:
    name, fake, check, what, module, probe_check = MISTAKES[mistake]
    monkeypatch.setattr(test_conformance, name, fake)
    with pytest.raises(AssertionError, match=f"{what}.*times the rounding"):
        check(gemma3, Engine.of(gemma3), _ids(gemma3, seq=10, batch=1))
    monkeypatch.setattr(module, name, fake)
    with pytest.raises(probe.ProbeFailed, match="times what rounding explains"):
        probe_check(Engine.of(gemma3), probe_ids(gemma3.vocab_size, batch=2, seq=10))
