"""Candidate readouts of audio and image samples against HF's own hidden states."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch
from modal_helpers import hf_forward, hf_lens_logprobs, processed
from PIL import Image

from mechscope.data.modal_prompt import render_prompt
from mechscope.errors import InputError
from mechscope.lens.candidates import candidate_scores
from mechscope.lens.candidates_modal import load_samples
from mechscope.lens.config import CandidatesConfig
from mechscope.lens.run import run_candidates, select_and_prepare
from mechscope.runs import RunDir, read_table
from tolerance import assert_fp64_close, assert_rounding_close, depth_of, logprob_scale

WORDS = ["neutral", "happy", "sad", "angry", "surprised"]


def _write(tmp_path, records):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return load_samples(path)


def _first_ids(lm, text, words):
    n = len(lm.tokenizer(text).input_ids)
    return [lm.tokenizer(text + " " + w).input_ids[n] for w in words]


def assert_sum_of_logprobs(got, lm, full, n_p: int, word: list[int]) -> None:
    """``got`` ``[L]`` equals the lens log-probabilities of ``word``'s tokens, teacher-forced
    after ``n_p`` prompt tokens, summed: a sum of len(word) terms, each at its scale."""
    rows = [hf_lens_logprobs(lm, full, n_p - 1 + j) for j in range(len(word))]
    want = sum(lp[:, tok] for (lp, _), tok in zip(rows, word, strict=True))
    scale = len(word) * logprob_scale(max(top for _, top in rows), lm.vocab_size)
    assert_rounding_close(got, want, depth=depth_of(lm), scale=scale, msg="summed scores")


@pytest.mark.parametrize("policy", ["first", "sum"])
def test_audio_scores_equal_plain_readout(audio_lm, speech_dir, policy):
    samples = load_samples(speech_dir / "samples.jsonl")[:2]
    config = CandidatesConfig(policy=policy)
    preps = select_and_prepare(audio_lm, samples, config)
    for prep in preps:
        scores = candidate_scores(audio_lm, prep, policy)  # [L, K]
        text = render_prompt(prep.sample.prompt, audio_lm.processor, "audio", sample="t")
        clip = soundfile.read(prep.sample.model_extra["audio"], dtype="float32")[0]
        inputs = processed(audio_lm, text, clip, "audio")
        assert prep.prompt_ids == inputs["input_ids"][0].tolist()
        if policy == "first":
            ref, top = hf_lens_logprobs(audio_lm, inputs)  # [L, V]
            want = ref[:, _first_ids(audio_lm, text, WORDS)]
            scale = logprob_scale(top, audio_lm.vocab_size)
            assert_rounding_close(scores, want, depth=depth_of(audio_lm), scale=scale)
            continue
        n_p = inputs["input_ids"].shape[1]
        for k, word in enumerate(prep.words):  # teacher-force each word with the same clip
            ids = inputs["input_ids"][0].tolist() + word[:-1]
            full = processed(audio_lm, text, clip, "audio")
            full["input_ids"] = torch.tensor([ids])
            full["attention_mask"] = full["input_ids"] * 0 + 1
            assert_sum_of_logprobs(scores[:, k], audio_lm, full, n_p, word)


def test_image_scores_equal_plain_readout(image_lm, image_files, tmp_path):
    recs = [
        {
            "id": f"i{i}",
            "image": str(path),
            "prompt": "{image} The picture looks",
            "candidates": WORDS,
            "semantic_label": "happy",
            "prosody_label": "sad",
        }
        for i, path in enumerate(image_files)
    ]
    preps = select_and_prepare(image_lm, _write(tmp_path, recs), CandidatesConfig())
    for prep, path in zip(preps, image_files, strict=True):
        assert prep.spans["image"][1] - prep.spans["image"][0] == 16  # (32 / 8) ** 2 patches
        text = render_prompt("{image} The picture looks", image_lm.processor, "image", sample="t")
        inputs = processed(image_lm, text, Image.open(path).convert("RGB"), "image")
        ref, top = hf_lens_logprobs(image_lm, inputs)
        got = candidate_scores(image_lm, prep)
        first = _first_ids(image_lm, text, WORDS)
        scale, depth = logprob_scale(top, image_lm.vocab_size), depth_of(image_lm)
        assert_rounding_close(got, ref[:, first], depth=depth, scale=scale, msg="lens")
        # the readout reads the last position, through the model's own head at the top
        head = hf_forward(image_lm, inputs).logits[0, -1].log_softmax(-1)[first]
        assert_rounding_close(got[-1], head, depth=depth, scale=scale, msg="head")


def test_win_rates_sum_to_one_and_match_the_scores(audio_lm, speech_dir, tmp_path):
    samples = load_samples(speech_dir / "samples.jsonl")
    config = CandidatesConfig(n_resamples=50)
    run = RunDir.create(tmp_path, "c", config.model_dump())
    result = run_candidates(run, audio_lm, samples, config, progress=False)
    assert len(result.samples) == 20  # the conflict subset of 5 x 5
    curves = read_table(run, "lens_candidates_curves").pivot(
        index="layer", columns="metric", values="mean"
    )
    # shares of the 20 samples: float64 means, at 1's scale
    total = curves["win_a"] + curves["win_b"] + curves["win_other"]
    assert_fp64_close(total.to_numpy(), 1.0, terms=20, scale=1.0, msg="shares")
    scores = np.stack([np.asarray(s["scores"]) for s in result.samples])  # [n, L, K]
    winner = scores.argmax(-1)
    a = np.array([s["label_a"] for s in result.samples])[:, None]
    want = (winner == a).mean(0)
    assert_fp64_close(curves["win_a"].to_numpy(), want, terms=20, scale=1.0, msg="wins of a")


def test_media_sample_on_a_text_model_is_refused(tiny_text_lm, speech_dir):
    samples = load_samples(speech_dir / "samples.jsonl")[:1]
    with pytest.raises(InputError, match="reads audio"):
        select_and_prepare(tiny_text_lm, samples, CandidatesConfig())


@pytest.fixture(scope="module")
def tiny_text_lm():
    from mechscope.models import load_model

    return load_model("tiny:llama")


def test_gemma3_summed_scores_equal_plain_teacher_forcing(gemma3_lm, image_files, tmp_path):
    """Gemma 3 passes token_type_ids (image tokens attend both ways): each teacher-forced
    row extends them with text marks."""
    rec = {
        "id": "g",
        "image": str(image_files[1]),
        "prompt": "{image} The picture looks",
        "candidates": WORDS,
        "semantic_label": "happy",
        "prosody_label": "sad",
    }
    (prep,) = select_and_prepare(gemma3_lm, _write(tmp_path, [rec]), CandidatesConfig(policy="sum"))
    assert "token_type_ids" in prep.model_inputs
    scores = candidate_scores(gemma3_lm, prep, "sum")
    text = render_prompt(rec["prompt"], gemma3_lm.processor, "image", sample="g")
    image = Image.open(image_files[1]).convert("RGB")
    n_p = len(prep.prompt_ids)
    for k, word in enumerate(prep.words):
        full = processed(gemma3_lm, text, image, "image")
        full["input_ids"] = torch.tensor([prep.prompt_ids + word[:-1]])
        full["attention_mask"] = torch.ones_like(full["input_ids"])
        pad = len(word) - 1
        full["token_type_ids"] = torch.nn.functional.pad(full["token_type_ids"], (0, pad))
        assert_sum_of_logprobs(scores[:, k], gemma3_lm, full, n_p, word)
