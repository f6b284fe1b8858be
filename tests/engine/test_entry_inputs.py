"""One entry point per input: ``Engine.run``, ``run_with_cache`` and ``Engine.generate`` read
text, texts, ids ``[seq]`` / ``[batch, seq]`` (tensors or lists), a padded batch with its
mask and ``Tokens`` the same way, and refuse a bad one in one line before any model work.

References never go through the engine: transformers' own forward of each row alone (the
logits a padded row must reproduce) and its own greedy ``generate``. Families: llama, gpt2
(learned positions), gemma2 (soft-capping, sliding window); stories260K where a trained
model matters (its greedy text is not one token repeated).
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine import Engine, Read, Site
from mechscope.engine.core.inputs import Tokens, to_tokens
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.errors import InputError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

FAMILIES = ["llama", "gpt2", "gemma2"]
TEXTS = ["When Mary and John went to the store, John gave", "Once upon a time"]


@pytest.fixture(scope="module", params=FAMILIES)
def eng(request) -> Engine:
    return Engine.of(load_model(f"tiny:{request.param}"))


@pytest.fixture(scope="module")
def stories(stories_path) -> Engine:
    return Engine.of(load_model(str(stories_path)))


def _alone(lm, ids: list[int]) -> torch.Tensor:
    """transformers' own logits of one unpadded row ``[seq, vocab]``."""
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([ids])).logits[0]


def test_every_form_of_one_input_gives_the_same_logits(eng) -> None:
    lm = eng.lm
    row = to_tokens(lm, TEXTS[1]).row(0)
    want = eng.run(TEXTS[1]).logits  # [1, seq, vocab]
    for form in (
        [TEXTS[1]],
        torch.tensor(row),
        torch.tensor([row]),
        row,
        [row],
        Tokens(torch.tensor([row])),
        torch.tensor([row], dtype=torch.int32),
    ):
        assert torch.equal(eng.run(form).logits, want), type(form)
    assert torch.equal(lm.run_with_cache(row, []).logits, want)
    assert_rounding_close(want[0], _alone(lm, row), depth=depth_of(lm))


def test_a_padded_batch_is_each_row_alone_through_every_entry_point(eng) -> None:
    """Texts (left-padded by the engine), ids with a right-padded mask, and ``Tokens``: each
    real position computes what the row computes alone in transformers' own forward."""
    lm = eng.lm
    rows = [to_tokens(lm, t).row(0) for t in TEXTS]
    batch = eng.run(TEXTS).logits  # [2, seq, vocab], left-padded
    width = max(map(len, rows))
    pad = 0
    right = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    by_mask = eng.run(right, attention_mask=mask).logits
    cached = lm.run_with_cache(right, [], attention_mask=mask).logits
    assert torch.equal(cached, by_mask)
    assert torch.equal(eng.run(to_tokens(lm, TEXTS)).logits, batch)
    for i, r in enumerate(rows):
        alone = _alone(lm, r)
        n = len(r)
        assert_rounding_close(batch[i, width - n :], alone, depth=depth_of(lm), msg=f"left {i}")
        assert_rounding_close(by_mask[i, :n], alone, depth=depth_of(lm), msg=f"right {i}")


def _hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = lm.model.generate(
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0
        )
    return out[0, len(ids) :].tolist()


def _eos(lm) -> set[int]:
    eos = lm.model.generation_config.eos_token_id
    found = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return found | ({lm.tokenizer.eos_token_id} - {None})


def _cut(tokens: list[int], eos: set[int]) -> list[int]:
    stops = [i for i, t in enumerate(tokens) if t in eos]
    return tokens[: stops[0]] if stops else tokens


def test_generate_takes_text_ids_and_a_padded_batch(eng) -> None:
    lm = eng.lm
    rows = [to_tokens(lm, t).row(0) for t in TEXTS]
    want = [_cut(_hf_greedy(lm, r, 6), _eos(lm)) for r in rows]
    by_text = eng.generate(TEXTS, Sampling(6))
    padded = to_tokens(lm, TEXTS)
    by_ids = eng.generate(padded.ids, Sampling(6), attention_mask=padded.attention_mask)
    by_prompt = eng.generate([Prompt(r, seeds=[0]) for r in rows], Sampling(6))
    for out in (by_text, by_ids, by_prompt):
        assert [list(o[0].tokens) for o in out] == want
    one = eng.generate(TEXTS[1], Sampling(6))
    assert len(one) == 1 and list(one[0][0].tokens) == want[1]


def test_generate_on_stories_equals_transformers(stories) -> None:
    lm = stories.lm
    text = "Once upon a time, there was a little"
    ids = to_tokens(lm, text).row(0)
    out = stories.generate(text, Sampling(12))[0][0]
    assert list(out.tokens) == _cut(_hf_greedy(lm, ids, 12), _eos(lm))
    assert len(set(out.tokens)) > 3  # a trained model: not one token repeated


class _Forwards:
    """Counts the model's forward calls (a refusal must come before any)."""

    def __init__(self, lm):
        self.n = 0
        self.handle = lm.model.register_forward_pre_hook(self._count)

    def _count(self, *args) -> None:
        self.n += 1


BAD_IDS = [
    (torch.tensor([[1.5, 2.0]]), "expected integer token ids, got a float32 tensor"),
    ([[1, 2.5]], "expected integer token ids, got 2.5 at row 0, position 1"),
    (torch.tensor([[True, False]]), "expected integer token ids, got a bool tensor"),
    (torch.tensor([[3, -1]]), "got -1 at row 0, position 1"),
    (torch.tensor([[3, 10**6]]), "got 1000000 at row 0, position 1"),
    (torch.zeros(1, 0, dtype=torch.long), "with at least one token, got shape [1, 0]"),
    (torch.zeros(1, 2, 2, dtype=torch.long), "expected token ids [batch, seq] or [seq]"),
]


@pytest.mark.parametrize(("bad", "expected"), BAD_IDS)
def test_bad_ids_are_refused_in_one_line_before_any_model_work(bad, expected) -> None:
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    calls = [
        lambda: eng.run(bad),
        lambda: lm.run_with_cache(bad),
        lambda: eng.generate(bad, Sampling(2)),
    ]
    if isinstance(bad, torch.Tensor) and bad.dim() == 2 and bad.numel():
        calls.append(lambda: eng.generate([Prompt(bad[0].tolist(), seeds=[0])], Sampling(2)))
    counter = _Forwards(lm)
    try:
        for call in calls:
            with pytest.raises(InputError) as err:
                call()
            message = str(err.value)
            assert "\n" not in message and expected in message, message
            assert "field 'input'" in message or "field 'ids'" in message, message
    finally:
        counter.handle.remove()
    assert counter.n == 0


def test_a_vocabulary_error_names_the_range_and_the_model() -> None:
    lm = load_model("tiny:llama")
    n = lm.embed_module().weight.shape[0]
    with pytest.raises(InputError, match=rf"in 0\.\.{n - 1} \(the vocabulary of tiny:llama\)"):
        lm.run_with_cache(torch.tensor([[n]]))


MASKS = [
    (torch.ones(1, 3), "expected an attention_mask of the ids' shape [1, 4], got [1, 3]"),
    (torch.tensor([[0, 1, 2, 1]]), "expected 0 or 1 (1 = a real token)"),
    (torch.tensor([[0, 0, 0, 0]]), "expected a real token in every row, row 0 has none"),
]


@pytest.mark.parametrize(("mask", "expected"), MASKS)
def test_a_bad_mask_is_refused_in_one_line(mask, expected) -> None:
    lm = load_model("tiny:llama")
    ids = torch.tensor([[5, 6, 7, 8]])
    for call in (
        lambda: Engine.of(lm).run(ids, attention_mask=mask),
        lambda: lm.run_with_cache(ids, attention_mask=mask),
        lambda: Engine.of(lm).generate(ids, Sampling(2), attention_mask=mask),
    ):
        with pytest.raises(InputError, match="field 'attention_mask'") as err:
            call()
        assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.device_count() >= 8, reason="this machine has cuda:7")
def test_a_device_this_machine_lacks_is_refused_in_one_line() -> None:
    lm = load_model("tiny:llama")
    counter = _Forwards(lm)
    try:
        for call in (
            lambda: lm.run_with_cache("hello", device="cuda:7"),
            lambda: Engine.of(lm).run("hello", [Read(Site("resid_pre", 0), device="cuda:7")]),
        ):
            with pytest.raises(InputError, match="field 'device': 'cuda:7' requested, but"):
                call()
    finally:
        counter.handle.remove()
    assert counter.n == 0
