"""The memory model of a graph run, and the rows it sends to a file when they do not fit.

On a tiny model with random transcoders: a budget of one byte sends the adjacency rows to a
file (and the backward passes to one row each), and the graph is the same, bit for bit, as
with the rows in memory at the same batch: adjacency, pruned nodes and edges, cumulative
influence, scores, the written file. The influence and pruning read the rows in blocks; the
blocks' size changes the sums' order only (rounding), and the streamed edge threshold is
the sorted one. The memory model's terms are the sizes of the tensors the run holds: the
nodes, what the pass's graph saves and its state keeps, the rows, the edge mask; and
circuit-tracer's dense matrix is the graph's square adjacency.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transcoder_sets import transcoder_set
from typer.testing import CliRunner

from mechscope.cli.main import app
from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError
from mechscope.graphs import attribute, memory, rows, store
from mechscope.graphs.ctracer_memory import circuit_tracer_terms, gemma2_2b
from mechscope.graphs.influence import find_threshold, streamed_threshold
from mechscope.graphs.neuronpedia import graph_json
from mechscope.graphs.replacement import attribution_pass, collect_nodes
from mechscope.graphs.transcoders import Transcoders
from mechscope.models import load_model
from tolerance import assert_exact, assert_rounding_close

IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12, 33, 7])


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory):
    eng = Engine.of(load_model("tiny:llama"))
    return eng, transcoder_set(eng.lm, tmp_path_factory.mktemp("tc"))


def _graph(eng, tset, monkeypatch, budget: int, **kw):
    plans = []
    monkeypatch.setattr(eng.lm, "memory_budget", budget)
    graph = attribute(eng, tset, IDS, max_n_logits=3, batch_size=1, on_plan=plans.append, **kw)
    return graph, plans[0]


def _same(a, b) -> None:
    """Two graphs equal bit for bit, down to the written file."""
    assert_exact(a.adjacency(), b.adjacency())
    pa, pb = a.prune(), b.prune()
    for name in ("node_mask", "edge_mask", "cumulative"):
        assert_exact(getattr(pa, name), getattr(pb, name), msg=name)
    assert a.scores() == b.scores()  # the same sums in the same order
    ja, jb = (graph_json(g, "g", "tiny", decode=str) for g in (a, b))
    assert ja == jb


@pytest.mark.parametrize("max_features", [None, 40])
def test_rows_in_a_file_give_the_same_graph(case, monkeypatch, tmp_path, max_features) -> None:
    eng, tset = case
    monkeypatch.setattr(store, "BLOCK_ELEMENTS", 700)  # several blocks of rows, either way
    monkeypatch.setattr(rows, "GATHER_ELEMENTS", 200)  # gradients gathered in chunks
    kept, plan = _graph(eng, tset, monkeypatch, 2**40, max_feature_nodes=max_features)
    assert not plan.on_disk and isinstance(kept.rows, torch.Tensor)
    filed, plan = _graph(eng, tset, monkeypatch, 1, max_feature_nodes=max_features,
                         folder=tmp_path)  # fmt: skip
    assert plan.on_disk and plan.batch == 1 and isinstance(filed.rows, store.RowFile)
    assert list(tmp_path.iterdir()) == [], "the file has no name: nothing is left behind"
    assert kept.layout.n_features == min(max_features or kept.n_active, kept.n_active)
    _same(kept, filed)


def test_blocks_of_rows_change_only_the_rounding(case, monkeypatch) -> None:
    eng, tset = case
    graph = attribute(eng, tset, IDS, max_n_logits=3)
    whole = graph.prune(), graph.scores()
    monkeypatch.setattr(store, "BLOCK_ELEMENTS", 500)
    assert store.block_rows(graph.layout.n_nodes) < graph.rows.shape[0] // 4
    blocked = graph.prune(), graph.scores()
    assert_exact(blocked[0].node_mask, whole[0].node_mask)
    assert_exact(blocked[0].edge_mask, whole[0].edge_mask)
    # each influence step sums the R rows in another order; the steps follow the layers
    depth = graph.rows.shape[0] * (graph.n_layers + 2)
    assert_rounding_close(blocked[0].cumulative, whole[0].cumulative, depth=depth, scale=1.0,
                          msg="cumulative influence")  # fmt: skip
    assert_rounding_close(torch.tensor(blocked[1]), torch.tensor(whole[1]), depth=depth,
                          scale=1.0, msg="scores")  # fmt: skip


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.8, 0.98])
def test_the_streamed_edge_threshold_is_the_sorted_one(threshold) -> None:
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(3000, generator=g) ** 4  # a long tail, as edge scores have
    scores[::7] = 0.0
    scores[1::11] = scores[2]  # ties
    chunks = list(scores.split(257))
    got = streamed_threshold(lambda: iter(chunks), threshold)
    assert_exact(got, find_threshold(scores, threshold))


def test_the_terms_are_the_tensors_the_run_holds(case, monkeypatch) -> None:
    eng, tset = case
    lm = eng.lm
    tc = Transcoders(tset, lm.n_layers)
    batch, n_pos = 3, len(IDS)
    with frozen_parameters(lm.model, tset):
        state, _, logits = attribution_pass(eng, tc, IDS, 1)  # the backward is batched
        nodes = collect_nodes(eng, tc, state, logits, max_n_logits=3)
    per_layer = torch.bincount(nodes.active[:, 0], minlength=lm.n_layers).tolist()
    n, k = nodes.n_features, len(nodes.logit_ids)
    plan = memory.plan_graph(lm, tc, n_pos, n, k, per_layer, max_feature_nodes=None,
                             batch_size=batch, folder=None, budget=2**40)  # fmt: skip
    terms = memory.graph_terms(plan.shape, batch, on_disk=False)
    held = [nodes.active, nodes.activations, nodes.directions, nodes.errors, nodes.embeds,
            nodes.logit_vectors, nodes.logits]  # fmt: skip
    held += [w for writes in nodes.decoders.values() for _, w in writes]
    assert terms["nodes"] == sum(t.nbytes for t in held)
    kept = [*state.x_in.values(), *state.out.values(), state.embed, state.final]
    # beyond the norms' scales [1, T, 1] and weights [d]
    saved = _saved(kept, lm, tset, smaller_than=max(n_pos, lm.d_model) + 1)
    assert [tuple(t.shape) for t in saved] == [(lm.n_kv_heads, n_pos * lm.n_heads //
                                               lm.n_kv_heads, n_pos)] * lm.n_layers  # fmt: skip
    assert terms["pass_kept"] == sum(t.nbytes for t in kept + saved)

    graph, plan = _graph(eng, tset, monkeypatch, 2**40)
    pruned = graph.prune()
    terms = plan.terms
    assert terms["rows"] == graph.rows.nbytes and terms["edge_mask"] == pruned.edge_mask.nbytes
    assert plan.shape.rows == graph.rows.shape[0] and plan.shape.nodes == graph.layout.n_nodes
    theirs = circuit_tracer_terms(plan.shape)
    assert theirs["square_adjacency"] == graph.adjacency().nbytes
    assert theirs["edge_matrix"] == terms["rows"]  # every feature kept: the same rows
    greedy, plan = _graph(eng, tset, monkeypatch, 2**40, max_feature_nodes=40)
    assert plan.terms["sorted_rows"] == greedy.rows.nbytes
    assert (
        plan.terms["rows"]
        == (40 + len(greedy.logit_ids))
        * (greedy.n_active + (lm.n_layers + 1) * n_pos + len(greedy.logit_ids))
        * 4
    )


def _saved(roots, lm, tset, smaller_than: int) -> list[torch.Tensor]:
    """The tensors the autograd graph behind ``roots`` saves, but parameters and tensors
    of fewer than ``smaller_than`` elements."""
    params = {p.data_ptr() for p in [*lm.model.parameters(), *tset.parameters()]}
    seen, found, stack = set(), {}, [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for name in dir(fn):
            value = getattr(fn, name) if name.startswith("_saved_") else None
            big = isinstance(value, torch.Tensor) and value.numel() >= smaller_than
            if big and value.data_ptr() not in params:
                found[value.data_ptr()] = value
        stack += [f for f, _ in fn.next_functions]
    return list(found.values())


def test_the_plan_keeps_rows_in_memory_while_they_fit(case) -> None:
    eng, tset = case
    tc = Transcoders(tset, eng.lm.n_layers)
    args = (eng.lm, tc, 200, 8000, 3, [4000, 3000, 1000])
    roomy = memory.plan_graph(*args, max_feature_nodes=None, batch_size=64, folder=None,
                              budget=2**40)  # fmt: skip
    assert not roomy.on_disk and roomy.batch == 64 and roomy.peak == roomy.terms["peak"]
    few = memory.plan_graph(*args, max_feature_nodes=5, batch_size=64, folder=None,
                            budget=2**40)  # fmt: skip
    assert few.batch == 5, "no more rows in the pass than one batch of targets needs"
    rows_bytes = roomy.terms["rows"]
    tight = memory.plan_graph(*args, max_feature_nodes=None, batch_size=64, folder=None,
                              budget=roomy.peak - rows_bytes // 2)  # fmt: skip
    assert tight.on_disk and tight.peak <= tight.budget
    record = tight.record()
    assert record["rows"] == "file" and record["rows_bytes"] == rows_bytes
    json.dumps(record)  # what the manifest keeps


def test_rows_too_large_for_the_disk_are_refused_before_the_run(case, monkeypatch) -> None:
    eng, tset = case
    tc = Transcoders(tset, eng.lm.n_layers)

    class Full:
        free = 1000

    monkeypatch.setattr(memory.shutil, "disk_usage", lambda where: Full)
    with pytest.raises(InputError, match=r"on disk .* fewer features"):
        memory.plan_graph(eng.lm, tc, 200, 8000, 3, [4000, 3000, 1000], max_feature_nodes=None,
                          batch_size=64, folder=None, budget=1)  # fmt: skip


def test_the_gemma_shape_and_circuit_tracers_layout() -> None:
    shape = gemma2_2b(tokens=1000, l0=64, max_feature_nodes=7500)
    n = 26 * 999 * 64
    assert (shape.features, shape.rows, shape.nodes) == (n, 7510, 7500 + 27 * 1000 + 10)
    assert shape.columns == n + 27 * 1000 + 10
    theirs = circuit_tracer_terms(shape)
    assert theirs["square_adjacency"] == 4 * shape.nodes**2
    assert theirs["pruning"] == 24 * shape.nodes**2
    assert theirs["edge_matrix"] == 4 * 7510 * shape.columns
    ours = memory.graph_terms(shape, 8, on_disk=True)
    assert ours["rows"] == 0 and ours["edge_mask"] == 7510 * shape.nodes


def test_a_run_records_its_memory_plan(case, tmp_path) -> None:
    eng = case[0]
    folder = tmp_path / "tc"
    transcoder_set(eng.lm, folder, layout="circuit_tracer")
    out = tmp_path / "run"
    argv = ["graph", "The cat sat on the", "-m", "tiny:llama", "--transcoders", str(folder),
            "--out", str(out), "--max-logits", "3", "--memory", "1MiB"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "manifest.json").read_text())["memory"]
    assert plan["budget_bytes"] == 2**20 and plan["batch"] >= 1
    assert plan["predicted_peak_bytes"] == max(
        v for k, v in plan["terms"].items() if k.endswith("_phase")
    )
    written = list((out / "graph").iterdir())
    assert all(p.suffix == ".json" for p in written), "no rows left behind"
    assert Path(out / "graph" / "graph.json").stat().st_size > 0
