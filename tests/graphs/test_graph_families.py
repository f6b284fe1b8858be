"""A graph on every tiny family the engine names (``NAMED_TYPES``): the replacement model
gives the model's logits to rounding and the graph has edges and scores; a family whose
replacement cannot be frozen exactly is refused in one line saying why."""

from __future__ import annotations

import pytest
import torch
from transcoder_sets import transcoder_set

from mechscope.engine import Engine
from mechscope.errors import UnsupportedInterventionError
from mechscope.graphs import attribute, replacement_logits
from mechscope.graphs.transcoders import Transcoders
from mechscope.models import load_model
from mechscope.models.tiny_types import NAMED_TYPES
from tolerance import assert_rounding_close, depth_of

IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12])

#: Families refused, with the reason the refusal names.
REFUSED = {
    "olmo": "names no epsilon",  # its LayerNorm's epsilon is not found, so not frozen exactly
    "olmo2": "names no ln2",  # norms after the MLP only: no normalised MLP input to read
    "olmo3": "names no ln2",
    "exaone4": "names no ln2",
    "opt": "names no ln2",
    "falcon": "attention scores cannot be edited",  # attention in its own code
    "bloom": "attention scores cannot be edited",
}
SUPPORTED = [t for t in NAMED_TYPES if t not in REFUSED]


def test_most_families_have_graphs() -> None:
    assert len(SUPPORTED) >= 30 and set(REFUSED) <= set(NAMED_TYPES)


@pytest.mark.parametrize("family", SUPPORTED)
def test_the_replacement_model_gives_the_models_logits(family: str, tmp_path) -> None:
    lm = load_model(f"tiny:{family}")
    eng = Engine.of(lm)
    tset = transcoder_set(lm, tmp_path, layout="saelens")
    want = eng.run(IDS[None]).logits[0]
    got = replacement_logits(eng, Transcoders(tset, lm.n_layers), IDS)
    assert_rounding_close(got, want, depth=depth_of(lm), msg=f"{family} replacement logits")
    graph = attribute(eng, tset, IDS, batch_size=64, max_n_logits=3)
    assert bool(graph.rows[:, : graph.layout.n_features].any()), "edges between features"
    replacement, completeness = graph.scores()
    assert 0.0 < replacement <= 1.0 and 0.0 < completeness <= 1.0


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_family_that_cannot_be_frozen_is_refused_in_one_line(family: str, tmp_path) -> None:
    lm = load_model(f"tiny:{family}")
    tset = transcoder_set(lm, tmp_path, layout="saelens")
    with pytest.raises(UnsupportedInterventionError, match=REFUSED[family]) as err:
        attribute(Engine.of(lm), tset, IDS)
    assert "\n" not in str(err.value)
