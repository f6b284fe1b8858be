"""QK attribution on tiny models of five families: Llama, Qwen 3 and Gemma 3 (q/k norms
inside the attention), Gemma 2 (a soft-cap on the scores) and DeepSeek V3 (latent
attention, whose queries, keys and values each pass a norm).

The score is the model's own; each side's contributions and the constant sum to it, and so
do all the pairwise products; a node's contribution equals what taking its write away
changes in a forward pass of the frozen model (two computations of one linear model); with
the q/k norms left unfrozen the sides no longer sum to the score. Bad targets are refused
in one line.
"""

from __future__ import annotations

import math

import pytest
import torch
from transcoder_sets import transcoder_set

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.graphs import freeze
from mechscope.graphs.qk import qk_attribution, replay_qk
from mechscope.graphs.qk_targets import QKTarget, check_targets, check_unmasked
from mechscope.graphs.replacement import replacement_context
from mechscope.graphs.replay import removal_deltas
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_exact, assert_fp64_close, assert_rounding_close

FAMILIES = ["llama", "qwen3", "gemma3_text", "gemma2", "deepseek_v3"]
IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12])
TARGETS = ["2.1:7,3", "2.3:5,5", "1.0:6,0"]


@pytest.fixture(scope="module", params=FAMILIES)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    eng = Engine.of(load_model(f"tiny:{request.param}"))
    tset = transcoder_set(eng.lm, tmp_path_factory.mktemp(request.param), layout="saelens")
    with replacement_context(eng, tset, IDS, 16, qk_layers=[1, 2]) as rep:
        yield rep, [qk_attribution(rep, t) for t in TARGETS]


def _depth(r) -> int:
    """The forward pass up to the layer and the backward pass from it."""
    return 2 * (r.target.layer + 1)


def _scale(r, side: str) -> float:
    """The largest the terms of one side can be: ``α · |k_j| · (Σ_a |q_a| + |q_i|)``."""
    parts, other, own = (r.q_parts, r.k, r.q) if side == "q" else (r.k_parts, r.q, r.k)
    return r.scaling * float(other.norm() * (parts.norm(dim=1).sum() + own.norm()))


def test_the_score_is_the_models(case) -> None:
    rep, results = case
    lm = rep.engine.lm
    layers = sorted({r.target.layer for r in results})
    with torch.no_grad():
        out = rep.engine.run(IDS[None], [Read(Site("attn_scores", la)) for la in layers])
    for r in results:
        t = r.target
        clean = float(out[Site("attn_scores", t.layer)][0, t.head, t.query, t.key])
        scale = r.scaling * float((r.q * r.k).abs().sum())
        assert_rounding_close(r.model_score, clean, scale=scale, depth=t.layer + 1, msg=str(t))
        capped = r.softcap * math.tanh(r.score / r.softcap) if r.softcap else r.score
        assert_rounding_close(capped, r.model_score, scale=scale, depth=1, msg=f"{t} α·q·k")
    assert (results[0].softcap is not None) == (lm.card.family == "gemma2")


def test_each_side_and_the_pairs_sum_to_the_score(case) -> None:
    _, results = case
    for r in results:
        t, depth = r.target, _depth(r)
        assert_rounding_close(r.via_q.sum(), r.score, scale=_scale(r, "q"), depth=depth,
                              msg=f"{t} through q")  # fmt: skip
        assert_rounding_close(r.via_k.sum(), r.score, scale=_scale(r, "k"), depth=depth,
                              msg=f"{t} through k")  # fmt: skip
        pairs = r.scaling * float(r.q_parts.sum(0) @ r.k_parts.sum(0))
        scale = r.scaling * float(r.q_parts.norm(dim=1).sum() * r.k_parts.norm(dim=1).sum())
        assert_rounding_close(pairs, r.score, scale=scale, depth=depth, msg=f"{t} pairs")
        table = r.table()
        later_q = table[(table["position"] > t.query) & (table["kind"] != "constant")]
        assert_exact(torch.tensor(later_q["via_q"].to_numpy()), torch.zeros(len(later_q)))
        later_k = table[(table["position"] > t.key) & (table["kind"] != "constant")]
        assert_exact(torch.tensor(later_k["via_k"].to_numpy()), torch.zeros(len(later_k)))
        assert table["kind"].iloc[-1] == "constant" and len(table) > 20
        got = r.pair_values.abs()
        assert bool((got[:-1] >= got[1:]).all()), "pairs largest first"
        a, b = r.pairs[:, 0], r.pairs[:, 1]
        want = r.scaling * (r.q_parts[a] * r.k_parts[b]).sum(1)
        assert_fp64_close(r.pair_values, want, terms=r.q.shape[0], msg=f"{t} pair products")
        assert len(r.pairs_table()) == len(r.pairs) == 50


def test_a_contribution_is_what_taking_the_node_away_changes(case) -> None:
    rep, results = case
    nodes, lm = rep.nodes, rep.engine.lm
    width = nodes.errors.shape[-1]
    for r in results:
        t = r.target
        top_q = r.via_q[:-1].abs().argsort(descending=True)[:3].tolist()
        top_k = r.via_k[:-1].abs().argsort(descending=True)[:3].tolist()
        features = r.via_q[: nodes.n_features].abs().argsort(descending=True)[:2].tolist()
        sources = sorted(set(top_q + top_k + features))
        deltas = removal_deltas(nodes, sources, width, lm.d_model)
        q, k = replay_qk(rep, t.layer, deltas)  # one row per node taken away
        none = {key: torch.zeros_like(v[:1]) for key, v in deltas.items()}
        q0, k0 = (x.double() for x in replay_qk(rep, t.layer, none))
        q_i, k_j = q0[0, t.query, t.head], k0[0, t.key, r.kv_head]
        via_q = r.scaling * (q_i - q[:, t.query, t.head].double()) @ k_j
        via_k = r.scaling * (k_j - k[:, t.key, r.kv_head].double()) @ q_i
        scale = r.scaling * float(q_i.norm() * k_j.norm())
        assert_rounding_close(r.via_q[sources], via_q, scale=scale, depth=_depth(r),
                              msg=f"{t} through q, nodes {sources}")  # fmt: skip
        assert_rounding_close(r.via_k[sources], via_k, scale=scale, depth=_depth(r),
                              msg=f"{t} through k, nodes {sources}")  # fmt: skip
        assert any(nodes.n_features <= s for s in sources) and min(sources) < nodes.n_features
        assert_beyond_rounding(via_q, torch.zeros_like(via_q), scale=scale, depth=_depth(r),
                               msg=f"{t}: the contributions checked are not rounding")  # fmt: skip


def test_an_unfrozen_qk_norm_leaves_the_score_unexplained(tmp_path, monkeypatch) -> None:
    eng = Engine.of(load_model("tiny:qwen3"))
    tset = transcoder_set(eng.lm, tmp_path, layout="saelens")
    monkeypatch.setattr(freeze, "attention_norms", lambda lm, layer, what="": [])
    with replacement_context(eng, tset, IDS, 16, qk_layers=[2]) as rep:
        r = qk_attribution(rep, QKTarget(2, 1, 7, 3))
    assert_beyond_rounding(r.via_q.sum(), r.score, scale=_scale(r, "q"), depth=_depth(r),
                           msg="q/k norms left free")  # fmt: skip


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("2.4:7,3", "a head in 0..3, got 4"),
        ("3.0:7,3", "a layer in 0..2, got 3"),
        ("2.1:3,7", "a key at or before its query (the mask is causal), got key 7 after query 3"),
        ("2.1:8,0", "positions in 0..7 (or -8..-1)"),
        ("2.1:7", "a score as LAYER.HEAD:QPOS,KPOS"),
    ],
)
def test_a_bad_target_is_refused_in_one_line(target: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)")) as e:
        check_targets(load_model("tiny:llama"), [target], len(IDS))
    assert "\n" not in str(e.value)


def test_negative_positions_count_from_the_end() -> None:
    (t,) = check_targets(load_model("tiny:llama"), ["2.1:-1,-8"], len(IDS))
    assert t == QKTarget(2, 1, 7, 0) and t.name == "qk_L2_H1_7_0"


def test_a_key_the_sliding_window_hides_is_refused(tmp_path) -> None:
    eng = Engine.of(load_model("tiny:gemma3_text"))  # layers 0 and 1 slide over 8 tokens
    ids = torch.arange(1, 13)
    check_unmasked(eng, ids, check_targets(eng.lm, ["2.0:11,1", "0.0:11,4"], 12))
    with pytest.raises(InputError, match="its mask hides key 1 from query 11") as err:
        check_unmasked(eng, ids, check_targets(eng.lm, ["1.0:11,1"], 12))
    assert "\n" not in str(err.value)
    tset = transcoder_set(eng.lm, tmp_path, layout="saelens")
    with replacement_context(eng, tset, ids, 4, qk_layers=[1]) as rep:
        with pytest.raises(InputError, match="its mask hides key 1 from query 11"):
            qk_attribution(rep, "1.0:11,1")
        with pytest.raises(InputError, match="made with layer 2 among its qk_layers"):
            qk_attribution(rep, "2.0:11,1")
