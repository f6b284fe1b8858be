"""bench_graphs' inputs and agreement check, without circuit-tracer: the random set read
back as a set at the points circuit-tracer's Gemma 3 map uses, the model folder as
transformers 4.57 reads it, and the check against a graph's own numbers, perturbed."""

from __future__ import annotations

import json

import bench_graphs
import graph_inputs
import pytest
import torch
from safetensors.torch import load_file, save_file

from mechscope.dictionaries import Hook, load_dictionary
from mechscope.engine import Engine
from mechscope.models import load_model
from mechscope.tolerance import pass_depth, rounding_tolerance
from tolerance import assert_exact


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    lm = load_model("tiny:gemma3_text")
    ids = torch.randint(3, lm.vocab_size, (6,), generator=torch.Generator().manual_seed(0))
    folder = graph_inputs.random_set(lm, ids, tmp_path_factory.mktemp("tc"))
    tset = load_dictionary(folder).requires_grad_(False)
    args = {**bench_graphs.ARGS, "batch_size": 8}
    return lm, tset, bench_graphs.ours(Engine.of(lm), tset, ids, args)


def as_circuit_tracer(mine: dict) -> dict:
    """What the peer saves, from our own graph (every feature selected, in node order)."""
    g, pruned = mine["graph"], mine["pruned"]
    edges = torch.zeros(g.layout.n_nodes, g.layout.n_nodes, dtype=torch.bool)
    edges[g.row_nodes] = pruned.edge_mask
    return {
        "adjacency": g.adjacency().clone(),
        "active_features": g.active.clone(),
        "selected_features": torch.arange(g.n_active),
        "logit_ids": g.logit_ids.clone(),
        "node_mask": pruned.node_mask.clone(),
        "edge_mask": edges,
        "scores": torch.tensor(mine["scores"], dtype=torch.float64),
    }


def test_the_random_set_sits_where_circuit_tracer_reads_and_writes(graph) -> None:
    lm, tset, mine = graph
    members = list(tset)
    assert len(members) == lm.n_layers
    for layer, d in enumerate(members):
        assert d.config.hook_in == Hook("mlp_in", layer, d.config.hook_in.model,
                                        d.config.hook_in.original)  # fmt: skip
        assert d.config.hook_out.site == "mlp_out" and d.config.kind == "skip_transcoder"
        assert d.config.activation == "jumprelu" and bool((d.threshold > 0).all())
    assert 0 < mine["graph"].n_active < lm.n_layers * 5 * graph_inputs.WIDTH // 10, "sparse"


def test_check_passes_on_the_same_graph_and_fails_on_a_changed_one(graph) -> None:
    lm, _, mine = graph
    theirs = as_circuit_tracer(mine)
    assert bench_graphs.check(mine, theirs, lm.n_layers).ok
    lay = mine["graph"].layout
    unscaled = {**theirs, "adjacency": theirs["adjacency"].clone()}
    unscaled["adjacency"][:, lay.tokens] /= lm.d_model**0.5  # the embedding scale left out
    assert not bench_graphs.check(mine, unscaled, lm.n_layers).ok
    moved = {**theirs, "adjacency": theirs["adjacency"].clone()}
    scale = float(theirs["adjacency"].abs().max())
    moved["adjacency"][-1, 0] += 10 * rounding_tolerance(scale, pass_depth(lm.n_layers))
    assert not bench_graphs.check(mine, moved, lm.n_layers).ok
    flipped = {**theirs, "node_mask": theirs["node_mask"].clone()}
    flipped["node_mask"][0] = ~flipped["node_mask"][0]
    assert not bench_graphs.check(mine, flipped, lm.n_layers).ok
    other = {**theirs, "scores": theirs["scores"] + 1e-3}
    assert not bench_graphs.check(mine, other, lm.n_layers).ok


def test_model_folder_as_transformers_4_57_reads_it(tmp_path) -> None:
    """The tied embedding under ``model.embed_tokens.weight``, the rope settings under
    4.57's names; the weights bit for bit."""
    src = tmp_path / "src"
    src.mkdir()
    weights = {"lm_head.weight": torch.randn(8, 4), "model.norm.weight": torch.randn(4)}
    save_file(weights, str(src / "model.safetensors"))
    rope = {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}
    cfg = {"tie_word_embeddings": True, "rope_parameters": rope}
    (src / "config.json").write_text(json.dumps(cfg))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (src / name).write_text("{}")
    out = graph_inputs.model_folder(src, tmp_path / "out")
    got = load_file(str(out / "model.safetensors"))
    assert set(got) == {"model.embed_tokens.weight", "model.norm.weight"}
    assert_exact(got["model.embed_tokens.weight"], weights["lm_head.weight"])
    written = json.loads((out / "config.json").read_text())
    assert (written["rope_theta"], written["rope_local_base_freq"]) == (1e6, 1e4)
