"""Candidate-restricted readouts against a plain computation from the model's hidden states,
up to the rounding of the lens logits (tests/tolerance.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lens_helpers import reference_lens_logprobs

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.lens.candidate_curves import per_sample_curves
from mechscope.lens.candidates import CandidateSample, candidate_scores, prepare_candidates
from mechscope.lens.config import CandidatesConfig
from mechscope.lens.readout import lens_logprobs, lens_nll
from mechscope.lens.run import run_candidates
from mechscope.runs import RunDir, read_table
from tolerance import (
    assert_exact,
    assert_fp64_close,
    assert_rounding_close,
    depth_of,
    logprob_scale,
    scale_of,
)

PROMPT = "She said, in a furious voice: I just won the lottery! The speaker sounds"
WORDS = ["happy", "sad", "angry", "Mary"]


def _sample(sid="e1", a="happy", b="angry", **kw) -> CandidateSample:
    return CandidateSample.model_validate(
        {
            "id": sid,
            "prompt": PROMPT,
            "candidates": WORDS,
            "semantic_label": a,
            "prosody_label": b,
            **kw,
        }
    )


def _word_ids(tiny, word: str) -> list[int]:
    full = tiny.tokenizer(PROMPT + " " + word).input_ids
    return full[len(tiny.tokenizer(PROMPT).input_ids) :]


def test_first_token_scores_equal_plain_readout(tiny):
    prep = prepare_candidates(
        _sample(), tiny.tokenizer, label_a="semantic_label", label_b="prosody_label"
    )
    scores = candidate_scores(tiny, prep, "first")  # [L, K]
    ids = tiny.tokenizer(PROMPT).input_ids
    ref, top = reference_lens_logprobs(tiny, ids)
    first = [_word_ids(tiny, w)[0] for w in WORDS]
    scale = logprob_scale(top, tiny.vocab_size)
    want = ref[:, -1, first]  # [L, K] at the last prompt token
    assert_rounding_close(scores, want, depth=depth_of(tiny), scale=scale, msg="first tokens")
    assert (prep.label_a, prep.label_b) == (0, 2)


def test_summed_scores_equal_plain_teacher_forcing(tiny):
    prep = prepare_candidates(
        _sample(), tiny.tokenizer, label_a="semantic_label", label_b="prosody_label", policy="sum"
    )
    scores = candidate_scores(tiny, prep, "sum")
    n_p = len(tiny.tokenizer(PROMPT).input_ids)
    assert any(len(_word_ids(tiny, w)) > 1 for w in WORDS)  # the policy matters here
    for k, word in enumerate(WORDS):
        wid = _word_ids(tiny, word)
        ref, top = reference_lens_logprobs(tiny, tiny.tokenizer(PROMPT).input_ids + wid)
        want = sum(ref[:, n_p - 1 + j, tok] for j, tok in enumerate(wid))  # [L]
        scale = len(wid) * logprob_scale(top, tiny.vocab_size)  # a sum of len(wid) terms
        assert_rounding_close(scores[:, k], want, depth=depth_of(tiny), scale=scale, msg=word)


def test_lens_nll_of_stacked_layers_equals_plain_readout(tiny):
    """Every layer's rows in one call, cut in chunks across layers, score each row's own
    target: the plain readout's NLL, and exactly the full log-probabilities' entry."""
    ids = tiny.tokenizer(PROMPT).input_ids
    eng = Engine.of(tiny)
    sites = [Site("resid_post", layer) for layer in range(tiny.n_layers - 1)]
    out = eng.run(torch.tensor([ids]), [Read(s) for s in sites])
    h = torch.cat([out[s][0, :-1] for s in sites])  # [(L - 1) · (T - 1), d]
    nxt = torch.tensor(ids[1:]).repeat(len(sites))  # [(L - 1) · (T - 1)]
    chunk = 7  # blocks that straddle layers (T - 1 is not a multiple of 7)
    assert (len(ids) - 1) % chunk
    got = lens_nll(eng, h, nxt, chunk=chunk)
    # the same rows unembedded in the same chunks: the same numbers
    full = lens_logprobs(eng, h, chunk=chunk)  # [n, V]
    assert_exact(got, -full.gather(-1, nxt[:, None])[:, 0])
    ref, top = reference_lens_logprobs(tiny, ids)  # [L, T, V]
    pos = np.arange(len(ids) - 1)
    want = -ref[: len(sites)][:, pos, np.array(ids[1:])]  # [L - 1, T - 1]
    scale = logprob_scale(top, tiny.vocab_size)
    got = got.view(len(sites), -1).numpy()
    assert_rounding_close(got, want, depth=depth_of(tiny), scale=scale, msg="lens NLL")


def test_curves_equal_plain_loop():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(6, 4))
    got = per_sample_curves(scores, 0, 2)
    for layer in range(6):
        win = int(np.argmax(scores[layer]))
        assert got["win_a"][layer] == (win == 0) and got["win_b"][layer] == (win == 2)
        assert got["win_other"][layer] == (win not in (0, 2))
        assert got["margin"][layer] == scores[layer, 2] - scores[layer, 0]  # one subtraction
        p = np.exp(scores[layer]) / np.exp(scores[layer]).sum()
        # p = exp(log p): its error is p times that of log p, rounded at a log-probability's
        # scale; a probability is at most 1.
        scale = logprob_scale(scale_of(scores[layer]), 4)
        got_p = [got["restricted_p_a"][layer], got["restricted_p_b"][layer]]
        assert_fp64_close(np.array(got_p), p[[0, 2]], terms=4, scale=scale, msg=f"layer {layer}")


def test_run_warns_about_multi_token_words_and_keeps_conflicts(tiny, tmp_path):
    samples = [_sample("e1"), _sample("e2", "sad", "angry"), _sample("e3", "sad", "sad")]
    run = RunDir.create(tmp_path, "c", {"t": 1})
    with pytest.warns(UserWarning, match="not a single token") as record:
        result = run_candidates(
            run, tiny, samples, CandidatesConfig(n_resamples=200), progress=False
        )
    listed = str(record[0].message)
    multi = [w for w in WORDS if len(_word_ids(tiny, w)) > 1]
    assert multi and all(repr(w) in listed for w in multi)
    assert [s["sample_id"] for s in result.samples] == ["e1", "e2"]  # e3's labels agree
    curves = read_table(run, "lens_candidates_curves")
    win = curves[curves.metric.isin(["win_a", "win_b", "win_other"])]
    # One indicator of three is 1 per sample; means over 2 samples are halves: exact.
    assert_exact(win.groupby("layer")["mean"].sum().to_numpy(), 1.0)
    frame = read_table(run, "lens_candidates")
    assert len(frame) == 2 * tiny.n_layers * len(WORDS)


def test_bad_candidate_inputs_name_the_sample(tiny):
    with pytest.raises(InputError, match=r"sample 'e9'.*prosody_label"):
        prepare_candidates(
            _sample("e9", "happy", "furious"),
            tiny.tokenizer,
            label_a="semantic_label",
            label_b="prosody_label",
        )
    with pytest.raises(InputError, match=r"sample 'e1'.*readout"):
        prepare_candidates(
            _sample(),
            tiny.tokenizer,
            label_a="semantic_label",
            label_b="prosody_label",
            policy="sum",
            readout=2,
        )
