"""Head ablation: forced-answer scoring under per-row head gates, random head sets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from whitebox_helpers import eager_copy, tiny_setup

from mechscope.anchors.attention.head_ablation import (
    ablation_study,
    ablation_summary,
    answer_probe,
    gate_without,
    random_head_sets,
    score_answer,
)
from mechscope.engine import Ablate, Site
from mechscope.errors import InputError
from tolerance import (
    assert_beyond_rounding,
    assert_fp64_close,
    assert_rounding_close,
    depth_of,
    logprob_scale,
    scale_of,
)


@pytest.fixture(scope="module")
def tiny():
    return tiny_setup()


def _loop_score(logits: torch.Tensor, answer: torch.Tensor) -> tuple[bool, float]:
    """Plain loop over answer tokens: logits [A, vocab] predict answer[k] at row k."""
    total, correct = 0.0, True
    for k, tok in enumerate(answer.tolist()):
        logp = torch.log_softmax(logits[k].double(), -1)
        total += float(logp[tok])
        correct &= int(logp.argmax()) == tok
    return correct, total


def test_probe_is_forced_prompt_then_gold(tiny):
    lm, _, trace, _ = tiny
    probe = answer_probe(lm.tokenizer, trace)
    assert lm.tokenizer.decode(probe.answer_ids) == "8}"
    assert lm.tokenizer.decode(probe.prompt_ids, skip_special_tokens=True).endswith("\\boxed{")


def test_score_answer_matches_plain_forward_and_ablate(tiny):
    lm, eng, trace, _ = tiny
    probe = answer_probe(lm.tokenizer, trace)
    heads = [(1, 0), (1, 1)]
    alphas = torch.stack(
        [gate_without([], lm.n_layers, lm.n_heads), gate_without(heads, lm.n_layers, lm.n_heads)]
    )
    correct, logprob = score_answer(eng, probe, alphas)
    ids = torch.cat([probe.prompt_ids, probe.answer_ids[:-1]])[None]
    n = probe.answer_ids.numel()
    with torch.no_grad():
        plain = eager_copy(lm)(input_ids=ids).logits[0, -n:]
    ablated = eng.run(ids, [Ablate(Site("z", 1, head=h)) for _, h in heads]).logits[0, -n:]
    # a sum of n log-probabilities, each up to the rounding of its logits
    top = float(torch.cat([plain, ablated]).abs().max())
    scale, depth = n * logprob_scale(top, lm.vocab_size), depth_of(lm)
    for row, logits in enumerate((plain, ablated)):
        ok, total = _loop_score(logits, probe.answer_ids)
        assert bool(correct[row]) == ok
        assert_rounding_close(logprob[row], total, depth=depth, scale=scale, msg=f"row {row}")
    # the ablation changes the answer's score
    assert_beyond_rounding(logprob[0], logprob[1], depth=depth, scale=scale, msg="ablation")


def test_random_head_sets():
    sets = random_head_sets(4, 3, 2, 5, exclude_heads=[(1, 0)], seed=3)
    assert len(sets) == 5
    for s in sets:
        assert len(set(s)) == 2
        assert all(layer != 0 and (layer, h) != (1, 0) for layer, h in s)
    assert sets == random_head_sets(4, 3, 2, 5, exclude_heads=[(1, 0)], seed=3)
    with pytest.raises(InputError, match="eligible"):
        random_head_sets(2, 2, 3, 1)


def test_ablation_study_and_summary(tiny):
    lm, eng, trace, _ = tiny
    probes = [answer_probe(lm.tokenizer, trace)]
    table = ablation_study(eng, probes, [(1, 0)], n_random=3, seed=1)
    assert list(table["condition"]) == ["none", "receivers", "random", "random", "random"]
    assert table["n_ablated"].tolist() == [0, 1, 1, 1, 1]
    summary = ablation_summary(table).set_index("condition")
    rnd = table[table["condition"] == "random"]
    # The mean and sd over the 3 sets (one probe each) of float64 log-probabilities.
    values = rnd["gold_logprob"].to_numpy()
    got = summary.loc["random", ["gold_logprob", "gold_logprob_sd"]].to_numpy(dtype=float)
    want = np.array([values.mean(), values.std(ddof=1)])
    assert_fp64_close(got, want, terms=3, scale=scale_of(values))
    assert summary.loc["none", "n_sets"] == 1


def test_summary_hand_computed():
    table = pd.DataFrame(
        {
            "trace": ["a", "b", "a", "b", "a", "b", "a", "b"],
            "condition": ["none", "none", "receivers", "receivers"] + ["random"] * 4,
            "set": [-1, -1, -1, -1, 0, 0, 1, 1],
            "n_ablated": [0, 0, 2, 2, 2, 2, 2, 2],
            "correct": [True, True, False, True, True, True, False, True],
            "gold_logprob": [-1.0, -2.0, -5.0, -3.0, -1.0, -1.0, -4.0, -2.0],
        }
    )
    s = ablation_summary(table).set_index("condition")
    assert s.loc["none", "accuracy"] == 1.0 and s.loc["receivers", "accuracy"] == 0.5
    # Means of binary fractions are exact; the sd is √0.125, rounded.
    assert s.loc["random", "accuracy"] == 0.75  # sets: 1.0 and 0.5
    assert_fp64_close(s.loc["random", "accuracy_sd"], np.std([1.0, 0.5], ddof=1), terms=2)
    assert s.loc["random", "gold_logprob"] == -2.0  # sets: -1 and -3


def test_no_random_sets_when_too_few_heads(tiny):
    lm, eng, trace, _ = tiny
    eligible = [(layer, h) for layer in range(1, lm.n_layers) for h in range(lm.n_heads)]
    table = ablation_study(eng, [answer_probe(lm.tokenizer, trace)], eligible, n_random=3)
    assert list(table["condition"]) == ["none", "receivers"]
