"""The study's shared passes give the paired analysis's numbers.

The study reuses one prompt cache for generation and teacher forcing, position-matches with
explicit position ids instead of pad tokens, and unembeds each distinct pass once for all
pairs. Each shortcut is checked here against the paired analysis run pair by pair
(:func:`mechscope.lens.paired.analyse_sample`, full passes, left padding), up to the
rounding of the lens logits, hidden states and attention probabilities they come from
(tests/tolerance.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from study_helpers import mini_problems

from mechscope.data.tokens import common_prefix
from mechscope.lens.attention_mass import key_onehot
from mechscope.lens.paired import PairedOptions, analyse_sample, forward_condition
from mechscope.lens.positions import as_run
from mechscope.lens.readout import readout_layers
from mechscope.studies.humaneval.arms import ASSISTED, prepare_task
from mechscope.studies.humaneval.cached_pass import prefix_cache, tail_pass
from mechscope.studies.humaneval.conditions import task_conditions
from mechscope.studies.humaneval.payload import pair_diff, run_task_group
from mechscope.studies.humaneval.readout import shared_pair_readout
from mechscope.studies.humaneval.task_run import MODES, GenerationOptions
from tolerance import (
    READOUT_ROWS,
    assert_lens_metrics_close,
    assert_rounding_close,
    depth_of,
    lens_logit_scale,
    scale_of,
    score_scale,
)


def attention_scale(engine, ids) -> float:
    """The largest |attention score| of any layer on ``ids``: the probabilities' scale."""
    from mechscope.engine import Read, Site

    sites = [Site("attn_scores", layer) for layer in range(engine.lm.n_layers)]
    out = engine.run(torch.tensor([ids]), [Read(s) for s in sites], logits=False)
    return max(score_scale(out[s]) for s in sites)


@pytest.fixture(scope="module")
def tasks(tiny):
    problems = mini_problems()
    samples = task_conditions(problems, list(problems)[:2], tiny.tokenizer)
    return [prepare_task(tiny, t, problems[t], samples[t]) for t in samples]


def test_tail_pass_on_a_cache_equals_the_full_pass(engine, tasks):
    task = tasks[0]
    n = task.reference.n_tokens
    depth = depth_of(engine.lm)
    for arm in task.arms.values():
        cond = arm.condition
        full = forward_condition(engine, cond, as_run(cond), n, True)
        mass = attention_scale(engine, cond.ids)
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
            assert_rounding_close(got.hidden, full.hidden, depth=depth, msg=f"hidden {k}")
            got_mass, want = got.attention, full.attention
            assert_rounding_close(got_mass, want, depth=depth, scale=mass, msg=f"mass {k}")


def test_shared_readout_equals_pairwise_readout(engine, tasks):
    prep = tasks[0].reference
    n = prep.n_tokens
    conds = [prep.conditions[c] for c in prep.contrast]
    hidden = [forward_condition(engine, c, as_run(c), n, False).hidden for c in conds]
    targets = torch.tensor(prep.cont_ids)
    got = shared_pair_readout(engine, hidden, [(0, 1), (1, 0)], targets, chunk_tokens=3)
    refs = readout_layers(engine, (hidden[0], hidden[1]), targets, chunk=5, workers=1)
    # the same hidden states read out in other chunks: one stage of rounding of the lens
    top = max(scale_of(engine.unembed(h)) for h in hidden)
    close = dict(logit_scale=top, vocab=engine.lm.vocab_size, depth=1)
    for layer in range(engine.lm.n_layers):
        ref = refs[:, layer]  # [5, T]: nll_a, nll_b, js, kl_ab, kl_ba
        got_ab = got[0, [0, 1, 3, 4, 5], layer]
        assert_lens_metrics_close(got_ab, ref, rows=READOUT_ROWS, **close, msg=f"{layer}")
        dnll = got[0, 2, layer][None]
        assert_lens_metrics_close(dnll, (ref[0] - ref[1])[None], rows=("dnll",), **close)
        swapped = got[1, [0, 4], layer]  # the swapped pair: NLL A is B's, KL(B‖A) is kl_ab
        assert_lens_metrics_close(swapped, ref[[1, 4]], rows=("nll", "div"), **close)


def test_every_pair_equals_the_paired_analysis(engine, tasks):
    payloads = run_task_group(engine, tasks, GenerationOptions(max_new_tokens=6))
    for task, payload in zip(tasks, payloads, strict=True):
        assert set(payload["completions"]) == set(task.arms)
        for variant in task.variants:
            for mode in MODES:
                got = pair_diff(payload, variant, mode)
                opts = PairedOptions(position_matched=mode == "position_matched")
                sample = task.samples[variant]
                ref = analyse_sample(engine, sample, opts)
                sem = ref.semantic
                conds = sample.conditions.values()
                top = max(lens_logit_scale(engine, c.ids) for c in conds)
                depth = depth_of(engine.lm)
                assert_lens_metrics_close(
                    got.metrics[..., sem],
                    ref.metrics[..., sem],
                    logit_scale=top,
                    vocab=engine.lm.vocab_size,
                    depth=depth,
                    msg=f"{variant} {mode}",
                )
                assert np.isnan(got.metrics[..., ~sem]).all()  # whitespace: not read out
                mass_scale = max(attention_scale(engine, c.ids) for c in conds)
                for cond, mass in ref.attention.items():
                    head_mean = mass.mean(axis=1, keepdims=True)
                    assert_rounding_close(
                        got.attention[cond], head_mean, depth=depth, scale=mass_scale, msg=cond
                    )
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
