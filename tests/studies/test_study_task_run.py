"""The study's shared passes give the paired analysis's numbers.

The study reuses one prompt cache for generation and teacher forcing, position-matches with
explicit position ids instead of pad tokens, and unembeds each distinct pass once for all
pairs. Each shortcut is checked here against the paired analysis run pair by pair
(:func:`mechscope.lens.paired.analyse_sample`, full passes, left padding).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from study_helpers import mini_problems

from mechscope.lens.attention_mass import key_onehot
from mechscope.lens.paired import PairedOptions, analyse_sample, forward_condition
from mechscope.lens.positions import as_run
from mechscope.lens.readout import readout_layers
from mechscope.studies.humaneval.arms import ASSISTED, common_prefix, prepare_task
from mechscope.studies.humaneval.cached_pass import prefix_cache, tail_pass
from mechscope.studies.humaneval.conditions import task_conditions
from mechscope.studies.humaneval.payload import pair_diff, run_task_group
from mechscope.studies.humaneval.readout import shared_pair_readout
from mechscope.studies.humaneval.task_run import MODES, GenerationOptions

#: fp32 logit-lens NLLs of the same hidden states through different kernels.
METRIC_ATOL = 2e-5
MASS_ATOL = 1e-6


@pytest.fixture(scope="module")
def tasks(tiny):
    problems = mini_problems()
    samples = task_conditions(problems, list(problems)[:2], tiny.tokenizer)
    return [prepare_task(tiny, t, problems[t], samples[t]) for t in samples]


def test_tail_pass_on_a_cache_equals_the_full_pass(engine, tasks):
    task = tasks[0]
    n = task.reference.n_tokens
    for arm in task.arms.values():
        cond = arm.condition
        full = forward_condition(engine, cond, as_run(cond), n, True)
        for k in (0, 1, cond.cont_start - 1):
            cache = prefix_cache(engine, cond.ids[:k])
            got = tail_pass(
                engine,
                cache,
                cond.ids[: cond.cont_start + n - 1],
                q_start=cond.cont_start - 1,
                n_queries=n,
                onehot=key_onehot(cond, 0),
            )
            torch.testing.assert_close(got.hidden, full.hidden, atol=1e-5, rtol=0)
            np.testing.assert_allclose(got.attention, full.attention, atol=MASS_ATOL)


def test_shared_readout_equals_pairwise_readout(engine, tasks):
    prep = tasks[0].reference
    n = prep.n_tokens
    conds = [prep.conditions[c] for c in prep.contrast]
    hidden = [forward_condition(engine, c, as_run(c), n, False).hidden for c in conds]
    targets = torch.tensor(prep.cont_ids)
    got = shared_pair_readout(engine, hidden, [(0, 1), (1, 0)], targets, chunk_tokens=3)
    refs = readout_layers(engine, (hidden[0], hidden[1]), targets, chunk=5, workers=1)
    for layer in range(engine.lm.n_layers):
        ref = refs[:, layer]  # [5, T]: nll_a, nll_b, js, kl_ab, kl_ba
        np.testing.assert_allclose(got[0, [0, 1, 3, 4, 5], layer], ref, atol=1e-6)
        np.testing.assert_allclose(got[0, 2, layer], ref[0] - ref[1], atol=1e-6)
        np.testing.assert_allclose(got[1, 0, layer], ref[1], atol=1e-6)  # swapped pair
        np.testing.assert_allclose(got[1, 4, layer], ref[4], atol=1e-6)  # KL(B‖A) is kl_ab


def test_every_pair_equals_the_paired_analysis(engine, tasks):
    payloads = run_task_group(engine, tasks, GenerationOptions(max_new_tokens=6))
    for task, payload in zip(tasks, payloads, strict=True):
        assert set(payload["completions"]) == set(task.arms)
        for variant in task.variants:
            for mode in MODES:
                got = pair_diff(payload, variant, mode)
                opts = PairedOptions(position_matched=mode == "position_matched")
                ref = analyse_sample(engine, task.samples[variant], opts)
                sem = ref.semantic
                np.testing.assert_allclose(
                    got.metrics[..., sem], ref.metrics[..., sem], atol=METRIC_ATOL
                )
                assert np.isnan(got.metrics[..., ~sem]).all()  # whitespace: not read out
                for cond, mass in ref.attention.items():
                    head_mean = mass.mean(axis=1, keepdims=True)
                    np.testing.assert_allclose(got.attention[cond], head_mean, atol=MASS_ATOL)
                assert got.segments == ref.segments
                assert got.position_ids == ref.position_ids
                assert got.cont_start == ref.cont_start
        # position matching puts the first semantic token at the same position id
        pm = pair_diff(payload, "tests", "position_matched")
        assert pm.position_ids["agentic"] == pm.position_ids[ASSISTED]


def test_generation_prompt_shares_the_teacher_forced_prefix(tiny):
    problems = mini_problems()
    samples = task_conditions(problems, ["Mini/0"], tiny.tokenizer, variants=("tests",))
    for mode in ("code", "prompt"):
        task = prepare_task(tiny, "Mini/0", problems["Mini/0"], samples["Mini/0"], mode)
        for arm in task.arms.values():
            cond = arm.condition
            shared = common_prefix(arm.gen_ids, cond.ids)
            assert shared >= len(arm.gen_ids) - 1  # at most the boundary token differs
            text = tiny.tokenizer.decode(arm.gen_ids)
            assert text.endswith("```python\n" if mode == "code" else problems["Mini/0"].prompt)
