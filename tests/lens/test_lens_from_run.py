"""A finished run directory reopens as the result its driver returned (``from_run``)."""

from __future__ import annotations

import warnings

import pytest
from lens_helpers import sample_record

from mechscope.lens.candidates import CandidateSample
from mechscope.lens.config import CandidatesConfig, DiffConfig
from mechscope.lens.result import CandidateResult, DiffResult
from mechscope.lens.run import run_candidates, run_diff
from mechscope.lens.samples import parse_sample
from mechscope.runs import RunDir
from payload_checks import assert_same


def _diff_samples(n: int):
    recs = [sample_record(f"s{i}", group="G10" if i < 2 else "G01") for i in range(n)]
    for i, r in enumerate(recs):
        r["continuation"] = f"def f{i}(x):\n    return x + {i}\n"
    return [parse_sample(r, "t") for r in recs]


@pytest.mark.parametrize("attention", [True, False])
def test_diff_result_from_run(tiny, tmp_path, attention):
    config = DiffConfig(contrast=("a", "b"), n_resamples=20, n_bins=3, attention=attention)
    run = RunDir.create(tmp_path, "r", config)
    run_diff(run, tiny, _diff_samples(3), config, progress=False)
    result = run_diff(run, tiny, _diff_samples(2), config, progress=False)  # s2's shard stays
    back = DiffResult.from_run(RunDir.open(run.path))
    assert [s.sample_id for s in back.samples] == ["s0", "s1"]
    assert_same(back, result)


def test_candidate_result_from_run(tiny, tmp_path):
    words = ["happy", "sad", "angry", "Mary"]  # some are several tokens: multi_token is kept
    prompt = "She said, in a furious voice: I just won the lottery! The speaker sounds"
    samples = [
        CandidateSample.model_validate(
            {"id": sid, "prompt": prompt, "candidates": words, "mood": a, "tone": b}
        )
        for sid, a, b in (("e2", "sad", "angry"), ("e1", "happy", "angry"), ("e3", "sad", "sad"))
    ]
    config = CandidatesConfig(label_a="mood", label_b="tone", policy="sum", n_resamples=20)
    run = RunDir.create(tmp_path, "c", config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the multi-token note
        result = run_candidates(run, tiny, samples, config, progress=False)
    assert result.multi_token and [s["sample_id"] for s in result.samples] == ["e2", "e1"]
    back = CandidateResult.from_run(RunDir.open(run.path))
    assert (back.label_a, back.label_b, back.policy) == ("mood", "tone", "sum")
    assert_same(back, result)
