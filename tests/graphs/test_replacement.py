"""The local replacement model and its edges, on tiny models of several families.

Random transcoders (written in SAELens' and Gemma Scope 2's layouts and read back) replace
every MLP. The replacement model (each MLP recomputed from its transcoder, plus the error
node) gives the model's logits to rounding. Every edge, computed by the batched backward
passes, equals the drop of its target's pre-activation when its source is taken away in a
forward pass of the frozen model (scales, attention scores and MLP constants patched to the
clean pass's values): two computations of the same linear model.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transcoder_sets import transcoder_set

from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.graphs import attribute, replacement_logits
from mechscope.graphs.replacement import attribution_pass, collect_nodes
from mechscope.graphs.replay import removal_deltas, replay, target_values
from mechscope.graphs.rows import compute_rows, n_columns
from mechscope.graphs.transcoders import Transcoders
from mechscope.models import load_model
from tolerance import assert_exact, assert_rounding_close, depth_of

FAMILIES = [
    "llama", "gpt2", "gemma2", "qwen3", "gemma3_text", "gpt_neox", "mistral", "qwen2", "deepseek_v3"
]  # fmt: skip
IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12])


def _layout(family: str) -> str:
    return "gemma_scope_2" if family.startswith("gemma") else "saelens"


@pytest.fixture(scope="module", params=FAMILIES)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    eng = Engine.of(load_model(f"tiny:{request.param}"))
    folder = tmp_path_factory.mktemp(request.param)
    return eng, transcoder_set(eng.lm, folder, layout=_layout(request.param))


def test_replacement_logits_equal_the_model(case) -> None:
    eng, tset = case
    tc = Transcoders(tset, eng.lm.n_layers)
    want = eng.run(IDS[None]).logits[0]
    got = replacement_logits(eng, tc, IDS)
    assert_rounding_close(got, want, depth=depth_of(eng.lm), msg="replacement logits")
    with frozen_parameters(eng.lm.model, tset):
        _, _, frozen_logits = attribution_pass(eng, tc, IDS, 3)
    assert_rounding_close(frozen_logits, want[-1], depth=depth_of(eng.lm), msg="frozen pass")


def test_every_edge_equals_the_frozen_model_forward(case) -> None:
    eng, tset = case
    lm = eng.lm
    tc = Transcoders(tset, lm.n_layers)
    with frozen_parameters(lm.model, tset):
        state, frozen, logits = attribution_pass(eng, tc, IDS, 24)
        nodes = collect_nodes(eng, tc, state, logits, max_n_logits=4)
        feats = torch.arange(nodes.n_features)[:: max(1, nodes.n_features // 20)]
        k = len(nodes.logit_ids)
        rows = torch.cat(
            [
                compute_rows(state, nodes, nodes.active[feats, 0], nodes.active[feats, 1],
                             nodes.directions[feats]),
                compute_rows(state, nodes, torch.full((k,), lm.n_layers),
                             torch.full((k,), len(IDS) - 1), nodes.logit_vectors),
            ]
        )  # fmt: skip
    assert nodes.n_features > 20, "the random transcoders fire"
    targets = feats.tolist() + [nodes.n_features + j for j in range(k)]
    sources = list(range(0, n_columns(nodes), 5))
    width = nodes.errors.shape[-1]
    none = {key: torch.zeros(1, len(IDS), v.shape[-1]) for key, v in
            removal_deltas(nodes, [0], width, lm.d_model).items()}  # fmt: skip
    clean = target_values(replay(eng, tc, IDS, frozen, none), nodes, targets)  # [1, n_t]
    for start in range(0, len(sources), 64):
        batch = sources[start : start + 64]
        removed = replay(eng, tc, IDS, frozen, removal_deltas(nodes, batch, width, lm.d_model))
        measured = (clean - target_values(removed, nodes, targets)).T  # [n_t, n_s]
        predicted = rows[:, batch]
        scale = max(float(predicted.abs().max()), float(clean.abs().max()))
        assert_rounding_close(
            predicted, measured, scale=scale, depth=depth_of(lm), msg=f"edges {batch[0]}…"
        )
    assert bool((rows.abs() > 0).any()), "some edges are not zero"


def test_graph_rows_are_the_edges_in_node_order(case) -> None:
    eng, tset = case
    graph = attribute(eng, tset, IDS, batch_size=16, max_n_logits=3)
    lay = graph.layout
    assert graph.rows.shape == (lay.n_features + lay.n_logits, lay.n_nodes)
    assert_exact(
        graph.row_nodes,
        torch.cat([torch.arange(lay.n_features), torch.arange(lay.logits.start, lay.n_nodes)]),
    )
    assert not bool(graph.rows[:, lay.logits].any()), "nothing reads a logit"
    layers = graph.active[:, 0]
    for i in range(lay.n_features):  # a feature has no edge from its own layer or above
        later = (layers >= layers[i]).nonzero(as_tuple=True)[0]
        assert not bool(graph.rows[i, later].any()), f"feature {i}: an edge from its layer on"
    replacement, completeness = graph.scores()
    assert 0.0 < replacement <= 1.0 and 0.0 < completeness <= 1.0


class TranscoderMLP(nn.Module):
    """An MLP that is its transcoder: the graph then has no error to speak of."""

    def __init__(self, transcoder: nn.Module) -> None:
        super().__init__()
        self.transcoder = transcoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transcoder(x)


def test_a_model_that_is_its_replacement_has_completeness_one(tmp_path) -> None:
    lm = load_model("tiny:llama")
    tset = transcoder_set(lm, tmp_path, layout="saelens")
    for layer in range(lm.n_layers):
        lm.layers()[layer].mlp = TranscoderMLP(tset[layer])
    eng = Engine.of(lm)
    graph = attribute(eng, tset, IDS, batch_size=16)
    errors = graph.rows[:, graph.layout.errors]
    assert_rounding_close(errors, torch.zeros_like(errors), scale=float(graph.rows.abs().max()),
                          depth=depth_of(lm), msg="error edges")  # fmt: skip
    replacement, completeness = graph.scores()
    assert_rounding_close(
        torch.tensor([replacement, completeness]), torch.ones(2), depth=depth_of(lm), msg="scores"
    )


def test_what_cannot_be_frozen_is_refused_in_one_line(tmp_path) -> None:
    eng = Engine.of(load_model("tiny:llama"))
    tset = transcoder_set(eng.lm, tmp_path, layout="saelens")
    partial = type(tset)({0: tset[0], 1: tset[1]}, "partial")
    with pytest.raises(InputError, match="a transcoder for every layer") as err:
        attribute(eng, partial, IDS)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="longer than"):
        attribute(eng, tset, IDS[:1])
    for layer in range(eng.lm.n_layers):
        tset[layer].config.hook_out = type(tset[layer].config.hook_out)("resid_post", layer)
    with pytest.raises(UnsupportedInterventionError, match="not the MLP's output") as err:
        attribute(eng, tset, IDS)
    assert "\n" not in str(err.value)
