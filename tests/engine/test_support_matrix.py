"""Every text decoder of the installed transformers: exact on every check, or refused in one line.

For each ``model_type`` a tiny random model is built from its own config class
(``tiny:<type>``); loading derives its card when no built-in card names it, and the engine's
probe checks the card. The test then runs the conformance checks of ``test_conformance`` —
each against an independent computation (transformers' hidden states, eager attention, a
4-D mask) — plus the residual identity. Each must pass, or the engine must refuse the
intervention it needs with one line. A wrong number in any of them is a silent failure,
which is what this test exists to catch.

The families researchers use today run in the default suite; every other model_type the
installed transformers can build tiny runs in the slow suite, which also checks the table in
docs/engine.md against what the models do now.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_conformance import CHECKS, _ids

from mechscope.engine import Engine, Read, Site
from mechscope.engine.conformance.support import support_row, support_table
from mechscope.errors import MechscopeError, UnsupportedInterventionError
from mechscope.models import load_model
from mechscope.models.tiny_types import NAMED_TYPES, known_model_types
from tolerance import assert_rounding_close, scale_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engine.md"
BEGIN, END = "<!-- support table: begin -->", "<!-- support table: end -->"


def check_residual_identity(lm, eng, ids) -> None:
    """What a layer writes to the residual is attn_out + mlp_out, read through the engine,
    compared with the layer's own input and output (one layer's adds, rounded at the
    residual stream's scale)."""
    names = ("resid_pre", "resid_post", "attn_out", "mlp_out")
    out = eng.run(ids, [Read(Site(n, l)) for l in range(lm.n_layers) for n in names])
    for l in range(lm.n_layers):
        pre, post, attn, mlp = (out[Site(n, l)] for n in names)
        scale = scale_of(pre, post, attn, mlp)
        assert_rounding_close(attn + mlp, post - pre, depth=1, scale=scale, msg=f"layer {l}")


FAMILY_CHECKS = [*CHECKS, check_residual_identity]


def _run_check(model_type: str, check) -> None:
    lm = load_model(f"tiny:{model_type}")
    eng = Engine.of(lm)
    try:
        check(lm, eng, _ids(lm))
    except UnsupportedInterventionError as exc:  # a refusal is fine; a wrong number is not
        assert str(exc) and "\n" not in str(exc)


@pytest.mark.parametrize("check", FAMILY_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("model_type", NAMED_TYPES)
def test_named_family_runs_out_of_the_box(model_type: str, check) -> None:
    _run_check(model_type, check)


def _documented() -> dict[str, str]:
    text = DOCS.read_text()
    table = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    return {m.group(1): line for line in table.splitlines() if (m := re.match(r"\| `(.+?)`", line))}


def test_the_docs_table_covers_every_decoder() -> None:
    assert set(_documented()) == set(known_model_types())


@pytest.mark.parametrize("model_type", NAMED_TYPES)
def test_named_families_are_documented_as_measured(model_type: str) -> None:
    assert support_row(model_type).markdown() == _documented()[model_type]


OTHERS = [t for t in known_model_types() if t not in NAMED_TYPES]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", OTHERS)
def test_every_other_decoder_is_exact_or_refused(model_type: str) -> None:
    row = support_row(model_type)
    assert row.markdown() == _documented()[model_type]
    if row.status in ("refused", "not built"):
        assert "\n" not in row.note
        return
    for check in FAMILY_CHECKS:
        try:
            _run_check(model_type, check)
        except pytest.skip.Exception:
            continue


def test_support_table_renders() -> None:
    rows = [support_row("llama"), support_row("falcon")]
    table = support_table(rows)
    assert table.count("\n") == 3 and "| `llama` | exact | llama |" in table


def test_a_refused_family_says_why_in_one_line() -> None:
    with pytest.raises(MechscopeError) as info:
        load_model("tiny:no_such_type")
    assert "\n" not in str(info.value)
