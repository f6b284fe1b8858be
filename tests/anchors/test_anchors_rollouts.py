"""Traces, prompts, rollout parsing and the resumable resampling driver."""

from __future__ import annotations

import pytest
from anchors_helpers import REFERENCE

from mechscope.anchors.config import RolloutSettings
from mechscope.anchors.resampling.rollouts import (
    Rollout,
    make_rollout,
    resample_trace,
    shard_id,
)
from mechscope.anchors.traces.trace import FORCED_ANSWER_CUE, Trace
from mechscope.errors import InputError

TEXT = (
    "Solve: what is 2 + 3? Put the answer in \\boxed{}. <think>\n"
    "Okay, I need to add two numbers.\n\nTwo plus three is five. "
    "Let me check that again.\n</think>\n\nThe answer is \\boxed{5}."
)


@pytest.fixture
def trace() -> Trace:
    return Trace.from_text("t1", TEXT, "5")


class FakeSampler:
    """Deterministic stand-in: the continuation names the prompt length, seed and sample."""

    def __init__(self, fail_at_call: int | None = None):
        self.calls: list[tuple[str, int, int]] = []
        self.fail_at_call = fail_at_call

    def generate(self, prompts, *, n, temperature, top_p, max_new_tokens, seed):
        if self.fail_at_call is not None and len(self.calls) == self.fail_at_call:
            raise RuntimeError("interrupted")
        self.calls.append((prompts[0], n, seed))
        if prompts[0].endswith(FORCED_ANSWER_CUE):
            return [[f"{5 + k % 2}}} done" for k in range(n)]]
        return [
            [
                f"Sample {k} with seed {seed} here. Then \\boxed{{{5 if k % 3 else 7}}}"
                if k != n - 1
                else "No final answer, I ran out of space"
                for k in range(n)
            ]
        ]


class DictStore:
    """Minimal in-memory store with the ShardStore interface."""

    def __init__(self):
        self.data: dict[str, dict] = {}

    def done(self, sample_id):
        return sample_id in self.data

    def write(self, sample_id, payload):
        self.data[sample_id] = payload

    def read(self, sample_id):
        return self.data[sample_id]


def test_prefixes_keep_original_text(trace):
    n = trace.n_chunks
    assert trace.chunk_texts == [
        "Okay, I need to add two numbers.",
        "Two plus three is five.",
        "Let me check that again.",
    ]
    assert trace.prefix(0) == TEXT[: TEXT.index("Okay")]
    assert trace.prefix(0).endswith("<think>\n")
    for p in range(1, n + 1):  # prompt + chunks[:p] with the original whitespace
        assert trace.prefix(p) == TEXT[: trace.chunks[p - 1].end]
        assert trace.prefix(p).endswith(trace.chunks[p - 1].text)
        assert trace.chunks[p - 1].text not in trace.prefix(p - 1)[len(trace.prefix(0)) :]
    assert "\n\nTwo plus" in trace.prefix(2)  # the blank line survives
    assert trace.forced_prompt(1) == trace.prefix(1) + FORCED_ANSWER_CUE
    with pytest.raises(InputError):
        trace.prefix(n + 1)


def test_bad_traces_raise_input_error():
    with pytest.raises(InputError, match="gold"):
        Trace.from_text("t", TEXT, None)
    with pytest.raises(InputError, match="gold"):
        Trace.from_text("t", TEXT, "  ")
    with pytest.raises(InputError, match="chunk"):
        Trace.from_text("t", "Prompt <think>\n \n</think> 5", "5")
    with pytest.raises(InputError, match="text"):
        Trace.from_text("t", "", "5")


def test_trace_from_reference(reference_dir):
    folder = REFERENCE / "deepseek-r1-distill-llama-8b" / "correct_base_solution" / "problem_6998"
    trace = Trace.from_reference(folder)
    assert trace.gold == "2865" and trace.n_chunks == 64
    assert trace.prefix(0).endswith("<think>\n")


def test_make_rollout():
    r = make_rollout("Hmm, so x is 5. Therefore \\boxed{5}.", "5", 3)
    assert (r.chunk_index, r.kept, r.answer, r.is_correct, r.has_answer) == (
        3,
        False,
        "5",
        True,
        True,
    )
    assert r.first_sentence == "Hmm, so x is 5."
    none = make_rollout("I keep thinking forever", "5", 0)
    assert (none.answer, none.has_answer, none.is_correct) == (None, False, False)
    forced = make_rollout("\\frac{10}{2}} and more", "5", 1, forced=True)
    assert (forced.answer, forced.is_correct, forced.forced) == ("\\frac{10}{2}", True, True)
    assert Rollout.from_dict(forced.to_dict()) == forced


def test_resample_trace_positions_and_views(trace):
    sampler = FakeSampler()
    settings = RolloutSettings(n=4, n_forced=2, max_new_tokens=16)
    out = resample_trace(trace, sampler, settings=settings)
    assert sorted(out.resampled) == [0, 1, 2, 3]  # n_chunks + 1 positions
    assert [c[0] for c in sampler.calls[::2]] == [trace.prefix(p) for p in range(4)]
    assert all(c[0].endswith(FORCED_ANSWER_CUE) for c in sampler.calls[1::2])
    assert len({c[2] for c in sampler.calls}) == 8  # a distinct seed per position and kind
    # kept rollouts of chunk i are the removed rollouts of chunk i + 1
    for i in range(trace.n_chunks):
        kept, removed_next = out.kept(i), out.removed(i + 1)
        assert [r.text for r in kept] == [r.text for r in removed_next]
        assert all(r.kept and r.chunk_index == i for r in kept)
        assert all(not r.kept and r.chunk_index == i for r in out.removed(i))
    # unanswered rollouts are kept and flagged, never dropped
    assert out.n_without_answer() == {p: 1 for p in range(4)}
    assert [r.is_correct for r in out.resampled[0][:3]] == [False, True, True]
    assert [r.answer for r in out.forced[2]] == ["5", "6"]


def test_resume_after_interruption_gives_identical_results(trace):
    settings = RolloutSettings(n=3, n_forced=1, max_new_tokens=8, seed=11)
    reference = resample_trace(trace, FakeSampler(), settings=settings)
    store = DictStore()
    with pytest.raises(RuntimeError):  # dies on the 6th call: positions 0 and 1 are stored
        resample_trace(trace, FakeSampler(fail_at_call=5), store, settings=settings)
    assert sorted(store.data) == [shard_id("t1", 0), shard_id("t1", 1)]
    second = FakeSampler()
    resumed = resample_trace(trace, second, store, settings=settings)
    assert len(second.calls) == 4  # only positions 2 and 3 were sampled again
    assert resumed.resampled == reference.resampled
    assert resumed.forced == reference.forced
    with pytest.raises(InputError, match="settings"):
        resample_trace(trace, FakeSampler(), store, settings=RolloutSettings(n=5))


def test_resume_with_the_run_shard_store(trace, tmp_path):
    shards = pytest.importorskip("mechscope.runs.shards")
    store = shards.ShardStore(tmp_path, "rollouts")
    settings = RolloutSettings(n=2, max_new_tokens=8)
    first = resample_trace(trace, FakeSampler(), store, settings=settings, positions=[0, 1])
    sampler = FakeSampler()
    both = resample_trace(trace, sampler, store, settings=settings)
    assert len(sampler.calls) == 2  # positions 2 and 3 only
    assert both.resampled[0] == first.resampled[0]
    assert store.done(shard_id("t1", 3))
