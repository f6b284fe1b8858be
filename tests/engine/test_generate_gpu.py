"""Generation on CUDA (``make test-gpu``): greedy = transformers' ``generate`` on the same
device, and a sampled rollout is the same alone and inside a batch.

Skips without a CUDA device. stories260K in fp32 with TF32 off, so the engine's steps and
``generate`` compute the same products (the engine's readout is fp32 either way).
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.models import load_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device (these run with make test-gpu on a machine with one)",
    ),
]


@pytest.fixture(scope="module")
def engine(stories_path):
    return Engine.of(load_model(str(stories_path), device="cuda", dtype="float32"))


def _ids(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(10, 300, (n,), generator=gen).tolist()


def test_greedy_equals_generate_on_cuda(engine):
    model = engine.lm.model
    prompts = [Prompt(_ids(7, 0), [0, 1]), Prompt(_ids(19, 1), [0])]
    out = engine.generate(prompts, Sampling(max_new_tokens=24), slots=2)
    for p, rollouts in zip(prompts, out, strict=True):
        ids = torch.tensor([list(p.ids)], device="cuda")
        ref = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0)
        ref = ref[0, ids.shape[1] :].tolist()
        eos = model.generation_config.eos_token_id
        ref = ref[: ref.index(eos)] if eos in ref else ref
        assert [list(r.tokens) for r in rollouts] == [ref] * len(p.seeds)


def test_a_sampled_rollout_is_the_same_alone_and_in_a_batch_on_cuda(engine):
    sampling = Sampling(max_new_tokens=32, temperature=0.6, top_p=0.95)
    prompts = [Prompt(_ids(9, 2), list(range(16))), Prompt(_ids(15, 3), [16, 17])]
    batch = engine.generate(prompts, sampling, slots=16)
    alone = engine.generate([Prompt(prompts[0].ids, [5])], sampling, slots=1)[0][0]
    assert alone == batch[0][5]
    assert len({r.tokens for r in batch[0]}) > 1


def test_recorded_decode_steps_equal_eager_steps_on_cuda(engine):
    """decode='graph' (each step recorded once per width, then replayed) against
    decode='eager': the same tokens, greedy and sampled, with refills, a width change and
    interventions during generation; and the graphs were really used."""
    from mechscope.engine import Gate, SuppressAttention
    from mechscope.engine.generation.decode_step import StaticStep

    lm = engine.lm
    alpha = torch.ones(lm.n_layers, lm.n_heads)
    alpha[2, :4] = 0.0
    prompts = [Prompt(_ids(11, 4), list(range(5)), 140), Prompt(_ids(30, 5), [5, 6], 40)]
    replays: list[int] = []
    capture = StaticStep._capture

    def counting(self, width):
        replays.append(width)
        return capture(self, width)

    sampled = Sampling(max_new_tokens=140, temperature=0.7, top_p=0.9)
    for ivs in ([], [Gate(alpha)], [SuppressAttention((2, 9))]):
        for sampling in (Sampling(max_new_tokens=140), sampled):
            eager = engine.generate(prompts, sampling, slots=3, interventions=ivs, decode="eager")
            with pytest.MonkeyPatch.context() as m:
                m.setattr(StaticStep, "_capture", counting)
                graph = engine.generate(
                    prompts, sampling, slots=3, interventions=ivs, decode="graph"
                )
            assert graph == eager
    assert len(set(replays)) >= 2  # 128 and 256 columns: one graph each
