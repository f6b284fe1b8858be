"""A graph run's result on a tiny model: what ``run_graph`` returns is the graph computed
directly, the run reopened without a model holds the same values plus its QK targets and
check, and the accessors select what they say."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from transcoder_sets import transcoder_set

from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.graphs import GraphResult, attribute
from mechscope.graphs.check import CheckConfig
from mechscope.graphs.config import GraphConfig
from mechscope.graphs.run import prepare, prepare_qk, run_graph, run_qk
from mechscope.models import load_model
from mechscope.runs import RunDir
from mechscope.runs.tables import read_table
from payload_checks import assert_same
from tolerance import assert_exact

PROMPT = "The cat sat on the"


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory: pytest.TempPathFactory):
    """A checked graph run with one QK target: the model, its inputs, what ``run_graph``
    returned and the run."""
    lm = load_model("tiny:llama")
    tmp = tmp_path_factory.mktemp("graph")
    transcoder_set(lm, tmp / "tc", layout="circuit_tracer")
    config = GraphConfig(prompt=PROMPT, transcoders=str(tmp / "tc"), max_n_logits=3,
                         slug="cat", qk=("2.1:-1,2",))  # fmt: skip
    check = CheckConfig(top_k=2, steer=2.0)
    record = {"graph": config.model_dump(mode="json"), "check": check.model_dump(mode="json")}
    run = RunDir.create(tmp, "run", record)
    tset, ids = prepare(lm, config, check)
    returned = run_graph(run, lm, config, tset, ids, scan="tiny:llama", check=check)
    qk = run_qk(run, lm, config, tset, ids, prepare_qk(lm, config, ids))
    return lm, config, tset, ids, returned, qk, run


def test_run_graph_returns_the_graph_computed_directly(graph_run) -> None:
    lm, config, tset, ids, returned, _, run = graph_run
    graph = attribute(Engine.of(lm), tset, ids, max_n_logits=config.max_n_logits,
                      desired_logit_prob=config.desired_logit_prob,
                      batch_size=config.batch_size)  # fmt: skip
    pruned = graph.prune(config.node_threshold, config.edge_threshold)
    # the same computation on the same machine, written to disk and read back: bit-identical
    replacement, completeness = graph.scores()
    assert_exact(returned.replacement_score, replacement, msg="replacement score")
    assert_exact(returned.completeness_score, completeness, msg="completeness score")
    assert_exact(returned.top_logit_prob, float(graph.logit_probs[0]), msg="top logit")
    expected = graph.node_table(pruned)
    for column in ("node", "layer", "position", "feature", "activation", "influence", "kept"):
        assert_exact(returned.node_table[column].to_numpy(), expected[column].to_numpy(),
                     msg=column)  # fmt: skip
    assert list(returned.node_table["kind"]) == list(expected["kind"])
    assert returned.n_nodes_kept == int(pruned.node_mask.sum())
    assert (returned.n_features, returned.n_active_features) == (
        graph.layout.n_features,
        graph.n_active,
    )
    assert torch.equal(returned.token_ids, ids) and returned.prompt == PROMPT
    assert returned.tokens == [lm.tokenizer.decode(int(t)) for t in ids]
    assert returned.top_logit == lm.tokenizer.decode(int(graph.logit_ids[0]))
    assert returned.graph_file == run.path / "graph" / "cat.json"
    data = json.loads(returned.graph_file.read_text())
    assert (len(data["nodes"]), len(data["links"])) == (
        returned.n_nodes_written,
        returned.n_links_written,
    )
    assert returned.qk_targets == [] and returned.qk_tables == {}  # the QK part runs after


def test_the_run_reopens_with_the_same_values_and_its_qk_part(graph_run) -> None:
    lm, config, tset, ids, returned, qk, run = graph_run
    reopened = GraphResult.from_run(run.path)
    without_qk = dataclasses.replace(reopened, qk_targets=[], qk_tables={})
    assert_same(without_qk, returned)
    assert reopened.qk_targets == qk
    name = qk[0]["table"]
    written = {table: read_table(run, table) for table in (name, f"{name}_pairs")}
    assert_same(reopened.qk_tables, written)
    again = run_graph(run, lm, config, tset, ids, scan="tiny:llama",
                      check=CheckConfig(top_k=2, steer=2.0))  # fmt: skip
    assert_same(again, reopened)  # resumed: read back, QK part included


def test_the_accessors(graph_run) -> None:
    *_, qk, run = graph_run
    result = GraphResult.from_run(run)
    table = result.to_frame()
    kept = result.nodes()
    assert len(kept) == result.n_nodes_kept and bool(kept["kept"].all())
    assert kept["influence"].is_monotonic_increasing
    assert len(result.nodes(kept=False)) == len(table)
    features = result.nodes("feature", kept=False)
    assert len(features) == result.n_features and set(features["kind"]) == {"feature"}
    assert len(result.nodes("logit")) == 3 and len(result.nodes("token")) == result.n_tokens
    with pytest.raises(InputError, match="a node kind"):
        result.nodes("head")
    targets = result.qk()
    assert list(targets["table"]) == [q["table"] for q in qk]
    name = qk[0]["table"]
    assert result.qk(0) is result.qk(name) is result.qk_tables[name]
    assert result.qk(name, pairs=True) is result.qk_tables[f"{name}_pairs"]
    assert result.qk(0)["kind"].iloc[-1] == "constant"
    with pytest.raises(InputError, match="a QK target among"):
        result.qk("qk_L0_H0_1_0")
    checks = result.interventions()
    assert len(checks) == 2 * 2  # two features × (ablate, steer) × the top logit
    assert_same(checks, read_table(run, "graph_interventions"))
    bare = dataclasses.replace(result, qk_targets=[], qk_tables={}, intervention_table=None)
    with pytest.raises(InputError, match="--qk"):
        bare.qk()
    with pytest.raises(InputError, match="a check"):
        bare.interventions()
    assert "replacement" in repr(result) and "<table" in result._repr_html_()


def test_a_run_without_a_graph_is_refused(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "empty", {"t": 1})
    with pytest.raises(InputError, match=r"graph/summary\.json"):
        GraphResult.from_run(run.path)
