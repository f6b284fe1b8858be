"""The study on the real benchmark and the real model (slow)."""

from __future__ import annotations

import pytest
import torch

from mechscope.data.humaneval import load_humaneval_problems
from mechscope.studies.humaneval.arms import ASSISTED, prepare_task
from mechscope.studies.humaneval.conditions import TOOL, task_conditions
from mechscope.studies.humaneval.payload import pair_diff, run_task_group
from mechscope.studies.humaneval.task_run import GenerationOptions
from mechscope.studies.sandbox import run_program
from tolerance import (
    assert_lens_metrics_close,
    assert_rounding_close,
    depth_of,
    lens_logit_scale,
    logprob_scale,
)

pytestmark = pytest.mark.slow

#: fp32 NLL of the same logits from the lens (cached tail pass) and from a plain forward.


def test_every_task_fits_and_the_control_is_length_matched(smollm2):
    problems = load_humaneval_problems()
    samples = task_conditions(problems, list(problems), smollm2.tokenizer)
    assert len(samples) == 164
    for tid, per in samples.items():
        task = prepare_task(smollm2, tid, problems[tid], per)
        assert task.length <= smollm2.max_context
        real = len(task.arms["tests"].condition.segments[TOOL])
        fake = len(task.arms["other_tests"].condition.segments[TOOL])
        assert abs(real - fake) <= 1, (tid, real, fake)
        assert TOOL not in task.arms["empty"].condition.segments


def test_the_sandbox_passes_every_canonical_solution():
    problems = load_humaneval_problems()
    failed = {
        tid: r.reason
        for tid, p in problems.items()
        if not (r := run_program(p.test_program(p.solution, redefines=False))).passed
    }
    assert failed == {}


def test_one_task_end_to_end_matches_a_plain_forward(smollm2):
    from mechscope.engine import Engine

    problems = load_humaneval_problems()
    tid = "HumanEval/2"
    samples = task_conditions(problems, [tid], smollm2.tokenizer)
    task = prepare_task(smollm2, tid, problems[tid], samples[tid])
    payload = run_task_group(Engine.of(smollm2), [task], GenerationOptions(max_new_tokens=24))[0]
    assert set(payload["completions"]) == {ASSISTED, "tests", "spec", "other_tests", "empty"}
    diff = pair_diff(payload, "tests", "as_run")
    cond = task.arms[ASSISTED].condition
    n = task.reference.n_tokens
    with torch.no_grad():
        logits = smollm2.model(torch.tensor([cond.ids])).logits[0].float()  # [seq, V]
    rows = logits[cond.cont_start - 1 : cond.cont_start - 1 + n]
    nll = -torch.log_softmax(rows, -1)[torch.arange(n), torch.tensor(task.reference.cont_ids)]
    sem = diff.semantic
    eng, v = Engine.of(smollm2), smollm2.vocab_size
    scale, depth = logprob_scale(float(logits.abs().max()), v), depth_of(smollm2)
    got = diff.metric("nll_b")[-1, sem]
    assert_rounding_close(got, nll.numpy()[sem], depth=depth, scale=scale, msg="NLL")
    pm = pair_diff(payload, "tests", "position_matched")
    assert pm.position_ids["agentic"] == pm.position_ids[ASSISTED]
    # a rotary model: moving the prompt changes nothing but fp32 rounding
    conds = task.samples["tests"].conditions.values()
    top = max(lens_logit_scale(eng, c.ids) for c in conds)
    assert_lens_metrics_close(
        pm.metrics[:, :, sem], diff.metrics[:, :, sem], logit_scale=top, vocab=v, depth=depth
    )
