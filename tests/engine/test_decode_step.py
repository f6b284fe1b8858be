"""The static decode step (the form CUDA graphs record) against the eager step, on the CPU.

``decode="static"`` writes every step's inputs into tensors that live as long as the cache's
buffers and reads the step from them; ``decode="eager"`` builds them afresh. Both must give
bit-identical logits at every step, so identical tokens: greedy and seeded sampling, slot
refills, buffers that grow and slots that are dropped, interventions during generation, on
tiny models of several families and on the real stories260K. What only a CUDA device can
show (the recording itself) is in ``test_generate_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

import mechscope.engine.generation.generate as generate_module
from mechscope.engine import Ablate, Engine, Gate, Site, SuppressAttention
from mechscope.engine.generation.decode_step import StaticStep, capture_refusal, decode_step
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models import load_model, tiny_types

FAMILIES = ["llama", "gpt2", "gpt_neox", "qwen3", "olmo2", "phi3"]
SAMPLED = Sampling(max_new_tokens=20, temperature=0.8, top_p=0.9)


@pytest.fixture(scope="module")
def stories(stories_path):
    return Engine.of(load_model(str(stories_path)))


def _ids(lm, n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(10, min(lm.vocab_size, 300), (n,), generator=gen).tolist()


def _prompts(lm) -> list[Prompt]:
    """Three prompt lengths, more rollouts than slots (refills), budgets that end rows at
    different steps once the queue is empty (idle slots dropped)."""
    return [
        Prompt(_ids(lm, 5, 0), seeds=[0, 1, 2], max_new_tokens=9),
        Prompt(_ids(lm, 12, 1), seeds=[3, 4], max_new_tokens=17),
        Prompt(_ids(lm, 8, 2), seeds=[5, 6, 7, 8], max_new_tokens=4),
    ]


def _recorded(monkeypatch, engine, prompts, sampling, decode, **kw):
    """``engine.generate`` with ``decode``, and every step's logits."""
    seen: list[torch.Tensor] = []
    steps: list = []

    def recording(*args):
        step = decode_step(*args)
        steps.append(step)

        def run(last):
            logits = step(last)
            seen.append(logits.clone())
            return logits

        return run

    monkeypatch.setattr(generate_module, "decode_step", recording)
    out = engine.generate(prompts, sampling, decode=decode, **kw)
    return out, seen, steps


def _same(monkeypatch, engine, prompts, sampling, **kw):
    eager, e_logits, _ = _recorded(monkeypatch, engine, prompts, sampling, "eager", **kw)
    static, s_logits, steps = _recorded(monkeypatch, engine, prompts, sampling, "static", **kw)
    assert isinstance(steps[0], StaticStep)
    assert static == eager
    assert len(s_logits) == len(e_logits) > 0
    for a, b in zip(s_logits, e_logits, strict=True):
        assert torch.equal(a, b)  # bit for bit, every step
    return static


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sampling", [Sampling(12), SAMPLED], ids=["greedy", "sampled"])
def test_static_step_equals_the_eager_step(monkeypatch, family, sampling):
    # without the window its real 4k checkpoints have: these rollouts run past 8 tokens
    monkeypatch.setitem(tiny_types._overrides(), "phi3", {})
    engine = Engine.of(load_model(f"tiny:{family}"))
    _same(monkeypatch, engine, _prompts(engine.lm), sampling, slots=3)


def test_static_step_on_stories_through_growth_and_dropped_slots(monkeypatch, stories):
    """Rows past the first 128 columns (a new width), past the buffers' first capacity (the
    static tensors are made again) and slots dropped as the last rows run alone."""
    lm = stories.lm
    # capacity starts at the longest prompt + 128 = 168 columns; the last row needs 170
    prompts = [
        Prompt(_ids(lm, 40, 4), seeds=[0, 1, 2], max_new_tokens=50),
        Prompt(_ids(lm, 3, 5), seeds=[3], max_new_tokens=167),
    ]
    greedy = Sampling(167)
    versions: list[int] = []
    original = StaticStep._reset

    def counting(self):
        original(self)
        versions.append(self.version)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(StaticStep, "_reset", counting)
        out = _same(monkeypatch, stories, prompts, greedy, slots=4)
    assert len(versions) >= 3  # allocated, shrunk, then grown: three sets of static tensors
    assert out[1][0].n_tokens == 167  # stories260K's greedy rollout runs to its budget


def test_static_step_keeps_interventions(monkeypatch, stories):
    lm = stories.lm
    alpha = torch.ones(lm.n_layers, lm.n_heads)
    alpha[2, :4] = 0.0
    alpha[1, 5] = 0.0
    prompts = [Prompt(_ids(lm, 10, 6), seeds=[0, 1, 2], max_new_tokens=16)]
    plain = stories.generate(prompts, Sampling(16), decode="static")
    for ivs in (
        [Gate(alpha)],
        [SuppressAttention((1, 7), heads=[0, 3, 5])],
        [Ablate(Site("mlp_out", 1))],
        [Gate(alpha), SuppressAttention((1, 4))],
    ):
        greedy = _same(monkeypatch, stories, prompts, Sampling(16), slots=2, interventions=ivs)
        assert greedy != plain  # the intervention changed the continuation
    _same(monkeypatch, stories, prompts, SAMPLED, slots=2, interventions=ivs)


def test_decode_modes_are_checked():
    engine = Engine.of(load_model("tiny:llama"))
    prompt = [Prompt([5, 6, 7], [0])]
    with pytest.raises(InputError, match="decode"):
        engine.generate(prompt, Sampling(3), decode="fast")
    with pytest.raises(UnsupportedInterventionError, match="CUDA graphs need a CUDA device"):
        engine.generate(prompt, Sampling(3), decode="graph")
    sliding = Engine.of(load_model("tiny:gemma3_text"))
    with pytest.raises(UnsupportedInterventionError, match="lock step"):
        sliding.generate([Prompt(list(range(5, 17)), [0])], Sampling(10), decode="graph")
    with pytest.raises(InputError, match="batching"):
        engine.generate(prompt, Sampling(3), batching="fast")
    with pytest.raises(UnsupportedInterventionError, match="lock step"):
        engine.generate(prompt, Sampling(3), batching="lock step", decode="graph")
    # auto on the CPU: the eager step, no warning
    eager = engine.generate(prompt, Sampling(3), decode="eager")
    assert engine.generate(prompt, Sampling(3)) == eager


def test_what_a_recording_cannot_hold_is_named():
    llama = load_model("tiny:llama")
    assert capture_refusal(llama, [Gate(torch.ones(llama.n_layers, llama.n_heads))]) is None
    resample = Ablate(Site("mlp_out", 0), "resample", reference=torch.zeros(2, 3, 4))
    assert "resampling Ablate" in capture_refusal(llama, [resample])
    assert "mixture-of-experts" in capture_refusal(load_model("tiny:mixtral"), [])


def test_a_recording_that_replays_differently_falls_back_to_eager(monkeypatch, stories):
    """The safety net of recorded steps, on the CPU: torch.cuda's recording is replaced by
    stand-ins (the step runs eagerly where it would be recorded) and the recorded run is
    made to differ. The first replay's check catches it, every later step runs eagerly, the
    rollouts are the eager ones and the reason is said once."""
    import contextlib

    import mechscope.engine.generation.decode_step as ds

    class Stream:
        def __init__(self, *args):
            pass

        def wait_stream(self, other):
            pass

    class Graph:
        def replay(self):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *args: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph", lambda g, pool=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(ds, "graph_refusal", lambda lm, steps: None)
    forward, calls = ds.StaticStep._forward, []

    def recorded_wrong(self, width):
        calls.append(width)
        out = forward(self, width)
        return out + 1.0 if len(calls) == ds.WARMUP_RUNS + 1 else out  # the recorded run

    monkeypatch.setattr(ds.StaticStep, "_forward", recorded_wrong)
    lm = stories.lm
    prompts = [Prompt(_ids(lm, 9, 11), seeds=[0, 1, 2], max_new_tokens=12)]
    eager = stories.generate(prompts, SAMPLED, slots=2, decode="eager")
    with pytest.warns(ds.GraphFallback, match="differ from the eager step's by 1") as said:
        graph = stories.generate(prompts, SAMPLED, slots=2, decode="graph")
    assert graph == eager
    assert len(said) == 1
    assert len(calls) > ds.WARMUP_RUNS + 2  # every later step ran eagerly
