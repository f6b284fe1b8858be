"""The rounding tolerances still fail on a real error.

The conformance checks (test_conformance.py) and the probe (engine/conformance/probe*.py) allow
``K · eps · scale · √depth`` (mechscope.tolerance), what summing in another order explains.
Here each runs with a deliberate mistake in what the engine is asked to do: the suppressed
span one key short or one key late, or the gate put on the neighbouring head. Each must
fail: on these tiny models such a mistake moves the logits by 10⁵ to 10⁶ times
``eps · scale · √depth``, far outside K = 32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import test_conformance
import torch
from test_conformance import _ids, check_gates, check_suppression_layer0, check_suppression_mask

from mechscope.engine import Engine, Gate, SuppressAttention
from mechscope.engine.conformance import probe, probe_attention
from mechscope.errors import UnsupportedFamilyError
from mechscope.models import load_model
from mechscope.models.trace import probe_ids

FAMILIES = ["llama", "gpt2", "gemma3_text", "qwen3", "olmo2"]
#: A suppressed span moved by one key.
MASK_MUTANTS: dict[str, Callable[[tuple[int, int]], tuple[int, int]]] = {
    "one key short": lambda span: (span[0], span[1] - 1),
    "one key late": lambda span: (span[0] + 1, span[1]),
}


def wrong_span(move: Callable[[tuple[int, int]], tuple[int, int]]) -> Callable[..., Any]:
    """``SuppressAttention`` with every span moved by ``move``."""
    return lambda spans, **kw: SuppressAttention(move(tuple(spans)), **kw)


def neighbour_head(alpha: torch.Tensor, **kw: Any) -> Gate:
    """``Gate`` with each layer's gates moved to the next head."""
    return Gate(alpha.roll(1, dims=-1), **kw)


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    lm = load_model(f"tiny:{request.param}")
    return lm, Engine.of(lm)


def test_the_checks_pass_without_a_mistake(model):
    lm, eng = model
    for check in (check_suppression_mask, check_suppression_layer0, check_gates):
        check(lm, eng, _ids(lm))
    report = probe.run_probe(Engine(lm))
    assert all(r == "ok" or r.startswith("n/a") for r in report.results.values()), report
    passed = {name for name, result in report.results.items() if result == "ok"}
    assert set(report.margins) == passed >= {"hidden", "lens", "gate", "slots", "generate"}
    assert max(report.margins.values()) < 1


@pytest.mark.parametrize("mutant", MASK_MUTANTS)
def test_conformance_catches_a_wrong_mask(model, mutant, monkeypatch):
    lm, eng = model
    monkeypatch.setattr(test_conformance, "SuppressAttention", wrong_span(MASK_MUTANTS[mutant]))
    with pytest.raises(AssertionError, match=r"suppression vs 4-D mask.*times the rounding"):
        check_suppression_mask(lm, eng, _ids(lm))
    with pytest.raises(AssertionError, match=r"suppressed layer 0.*times the rounding"):
        check_suppression_layer0(lm, eng, _ids(lm))


def test_conformance_catches_a_wrong_head(model, monkeypatch):
    lm, eng = model
    monkeypatch.setattr(test_conformance, "Gate", neighbour_head)
    with pytest.raises(AssertionError, match=r"gate 0 on head .*times the rounding"):
        check_gates(lm, eng, _ids(lm))


@pytest.mark.parametrize("mutant", MASK_MUTANTS)
def test_probe_refuses_suppression_with_a_wrong_mask(model, mutant, monkeypatch):
    lm, _ = model
    monkeypatch.setattr(probe_attention, "SuppressAttention", wrong_span(MASK_MUTANTS[mutant]))
    eng = Engine(lm)
    with pytest.raises(probe.ProbeFailed, match="times what rounding explains"):
        probe_attention.check_suppression(eng, probe_ids(lm.vocab_size, batch=2, seq=10))
    fresh = load_model(lm.spec)  # its refusals are changed: not shared
    probe.apply_probe(Engine(fresh))
    assert fresh.refused["SuppressAttention"].startswith("the suppression check failed")


def test_probe_refuses_a_model_whose_gate_hits_the_wrong_head(model, monkeypatch):
    lm, _ = model
    monkeypatch.setattr(probe, "Gate", neighbour_head)
    with pytest.raises(probe.ProbeFailed, match="times what rounding explains"):
        probe.check_gate(Engine(lm), probe_ids(lm.vocab_size, batch=2, seq=10))
    with pytest.raises(UnsupportedFamilyError, match="probe: gate failed"):
        probe.apply_probe(Engine(load_model(lm.spec)))
