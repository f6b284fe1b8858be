"""Against circuit-tracer 0.5 itself, in its own environment (it pins transformers 4.57.3
and nnsight, so it cannot share mechscope's): set ``MECHSCOPE_CTRACER_PYTHON`` to that
environment's python. Offline: circuit-tracer's environment builds a tiny random Qwen 3
(``Qwen3ForCausalLM``: the smallest family circuit-tracer 0.5 runs offline there, see
``ctracer_child.py``) from its config and saves it with the tiny tokenizer; both sides load
it from that folder, circuit-tracer through TransformerLens. A random JumpReLU
skip-transcoder set is written in circuit-tracer's layout (``layer_i.safetensors`` +
``config.yaml``), which circuit-tracer's loader and ``mechscope.dictionaries`` both read.
For the same token ids: the same logit targets and active features, the adjacency equal
to fp32 rounding, the same pruned nodes and edges, and the same scores.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from transcoder_sets import random_transcoder, write_circuit_tracer

from mechscope.dictionaries import load_dictionary
from mechscope.engine import Engine
from mechscope.graphs import attribute
from mechscope.graphs.neuronpedia import graph_json
from mechscope.models import load_model
from mechscope.models.tiny import tiny_tokenizer
from tolerance import assert_exact, assert_rounding_close, depth_of

PYTHON = os.environ.get("MECHSCOPE_CTRACER_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON or not Path(PYTHON).exists(), reason="MECHSCOPE_CTRACER_PYTHON is not set"
)
CHILD = Path(__file__).with_name("ctracer_child.py")
PROMPT = "The trophy didn't fit in the suitcase because it was too big. It"
ARGS = {
    "max_n_logits": 5,
    "desired_logit_prob": 0.95,
    "batch_size": 16,
    "node_threshold": 0.8,
    "edge_threshold": 0.98,
}


def _child(*args: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([PYTHON, str(CHILD), *args], capture_output=True, text=True,
                          timeout=900, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]


def _model_folder(folder: Path) -> Path:
    """The tiny tokenizer's files in a form both transformers read, then the model."""
    tok = tiny_tokenizer()
    folder.mkdir()
    tok.backend_tokenizer.save(str(folder / "tokenizer.json"))
    special = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **special})
    )
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    ids = {k.removesuffix("_token"): tok.convert_tokens_to_ids(v) for k, v in special.items()}
    (folder / "special_ids.json").write_text(json.dumps({**ids, "vocab_size": len(tok)}))
    _child("make", str(folder))
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ctracer")
    model_dir = _model_folder(root / "model")
    lm = load_model(str(model_dir), dtype="float32")
    members = []
    for layer in range(lm.n_layers):
        d = random_transcoder(lm.d_model, layer, skip=True, jumprelu=True, seed=3)
        d.w_dec.data.mul_(30)  # reconstructions of the size of the MLP outputs
        members.append(d)
    tc_dir = write_circuit_tracer(
        members, root / "tc", model_name="tiny-qwen3", hook_out="mlp.hook_out"
    )
    tset = load_dictionary(tc_dir).requires_grad_(False)
    ids = lm.to_tokens(PROMPT, prepend_bos=True).ids[0].cpu()
    return root, model_dir, tc_dir, lm, tset, ids


@pytest.fixture(scope="module", params=[None, 300], ids=["every-feature", "300-by-influence"])
def both(setup, request: pytest.FixtureRequest):
    """Both graphs of the prompt: every active feature, or 300 chosen greedily by influence
    (circuit-tracer's ranking, updated every ``4 × batch_size`` rows)."""
    root, model_dir, tc_dir, lm, tset, ids = setup
    args = {**ARGS, "max_feature_nodes": request.param, "ids": ids.tolist()}
    name = f"ct-{request.param}"
    (root / f"{name}.json").write_text(json.dumps(args))
    _child("attribute", str(model_dir), str(tc_dir), str(root / f"{name}.json"),
           str(root / f"{name}.pt"))  # fmt: skip
    theirs = torch.load(root / f"{name}.pt")
    ours = attribute(
        Engine.of(lm), tset, ids, max_n_logits=ARGS["max_n_logits"],
        desired_logit_prob=ARGS["desired_logit_prob"], batch_size=ARGS["batch_size"],
        max_feature_nodes=request.param,
    )  # fmt: skip
    theirs["file"] = json.loads((root / name / "parity.json").read_text())
    return lm, ours, theirs


def test_the_same_nodes(both) -> None:
    lm, ours, theirs = both
    assert_exact(ours.tokens, theirs["input_tokens"])
    assert_exact(ours.logit_ids, theirs["logit_ids"])
    assert_rounding_close(ours.logit_probs, theirs["logit_probs"], depth=depth_of(lm),
                          scale=1.0, msg="logit probabilities")  # fmt: skip
    selected = theirs["selected_features"]
    assert ours.n_active == len(theirs["active_features"]) > 300, "the random transcoders fire"
    assert_exact(ours.active, theirs["active_features"][selected])
    assert_rounding_close(
        ours.activations, theirs["activation_values"][selected], depth=depth_of(lm),
        scale=float(theirs["activation_values"].abs().max()), msg="activations",
    )  # fmt: skip


def test_the_same_adjacency(both) -> None:
    lm, ours, theirs = both
    want = theirs["adjacency"]
    got = ours.adjacency()
    assert got.shape == want.shape
    assert_rounding_close(got, want, depth=depth_of(lm), scale=float(want.abs().max()),
                          msg="adjacency")  # fmt: skip
    assert_exact(got == 0, want == 0)  # the same structural zeros


def test_the_same_pruned_graph_and_scores(both) -> None:
    lm, ours, theirs = both
    pruned = ours.prune(ARGS["node_threshold"], ARGS["edge_threshold"])
    assert_exact(pruned.node_mask, theirs["node_mask"])
    edges = torch.zeros_like(theirs["edge_mask"])
    edges[ours.row_nodes] = pruned.edge_mask
    assert_exact(edges, theirs["edge_mask"])
    # a running sum over the nodes in influence order, shares of a total of 1; compared in
    # that order (the curve pruning cuts): two nodes whose influences tie to rounding may
    # come in either order, which moves each one's own value by the other's share
    assert_rounding_close(pruned.cumulative.sort().values, theirs["cumulative"].sort().values,
                          depth=ours.layout.n_nodes, scale=1.0,
                          msg="cumulative influence")  # fmt: skip
    assert_rounding_close(torch.tensor(ours.scores(), dtype=torch.float64), theirs["scores"],
                          depth=depth_of(lm), scale=1.0, msg="scores")  # fmt: skip


def test_the_same_graph_file(both) -> None:
    """Our file of our graph against circuit-tracer's ``create_graph_files`` of its graph:
    the same metadata, nodes and links; the floats to rounding."""
    lm, ours, theirs = both
    want = theirs["file"]
    got = graph_json(ours, "parity", "tiny-qwen3", node_threshold=ARGS["node_threshold"],
                     edge_threshold=ARGS["edge_threshold"], decode=lm.tokenizer.decode)  # fmt: skip
    got = json.loads(json.dumps(got))
    assert got["metadata"] == want["metadata"] and got["qParams"] == want["qParams"]
    floats = ("influence", "activation", "token_prob")

    def fixed(nodes: list[dict]) -> list[dict]:
        return [{k: v for k, v in n.items() if k not in floats} for n in nodes]

    assert fixed(got["nodes"]) == fixed(want["nodes"])
    assert [n["clerp"] for n in got["nodes"]] == [n["clerp"] for n in want["nodes"]]
    for key, depth, scale in (
        ("influence", ours.layout.n_nodes, 1.0),
        ("token_prob", depth_of(lm), 1.0),
        ("activation", depth_of(lm), float(ours.activations.abs().max())),
    ):
        both_nodes = list(zip(got["nodes"], want["nodes"], strict=True))
        assert all(g[key] is None for g, w in both_nodes if w[key] is None)
        pairs = [(g[key], w[key]) for g, w in both_nodes if w[key] is not None]
        g_values = torch.tensor([g for g, _ in pairs], dtype=torch.float64)
        w_values = torch.tensor([w for _, w in pairs], dtype=torch.float64)
        if key == "influence":  # in influence order, as above (near-ties in either order)
            g_values, w_values = g_values.sort().values, w_values.sort().values
        assert_rounding_close(g_values, w_values, depth=depth, scale=scale, msg=key)
    link = [(x["source"], x["target"]) for x in got["links"]]
    assert link == [(x["source"], x["target"]) for x in want["links"]]
    assert_rounding_close(
        torch.tensor([x["weight"] for x in got["links"]], dtype=torch.float64),
        torch.tensor([x["weight"] for x in want["links"]], dtype=torch.float64),
        depth=depth_of(lm), scale=float(theirs["adjacency"].abs().max()), msg="link weights",
    )  # fmt: skip
