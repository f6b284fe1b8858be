"""Batched decoding from prompt caches against Hugging Face's own ``generate``."""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine
from mechscope.lens.study.cached_pass import prefill
from mechscope.lens.study.decode import Row, decode_rows

PROMPTS = [
    "def add(a, b):\n    return",
    "Once upon a time, there was a little girl named Lily. She",
    "The Eiffel",
]


@pytest.fixture
def no_eos(tiny):
    """The tiny model with no end-of-sequence token, so every row runs to its budget."""
    Engine.of(tiny)
    config, tok = tiny.model.generation_config, tiny.tokenizer
    saved = config.eos_token_id, tok.eos_token
    config.eos_token_id = None
    tok.eos_token = None
    yield tiny
    config.eos_token_id, tok.eos_token = saved


def _rows(lm, budgets, seeds=None):
    rows = []
    for i, (p, n) in enumerate(zip(PROMPTS, budgets, strict=False)):
        ids = lm.tokenizer(p, add_special_tokens=False).input_ids
        rows.append(Row(prefill(lm, ids[:-1]), ids[-1], n, seeds[i] if seeds else 0))
    return rows


def _hf_greedy(lm, prompt: str, n: int) -> list[int]:
    ids = lm.tokenizer(prompt, add_special_tokens=False).input_ids
    out = lm.model.generate(
        torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return out[0, len(ids) :].tolist()


def test_batched_greedy_matches_generate_row_by_row(no_eos):
    lm = no_eos
    budgets = [9, 4, 14]  # rows leave the batch at different steps
    got = decode_rows(lm, _rows(lm, budgets))
    for prompt, n, d in zip(PROMPTS, budgets, got, strict=True):
        ref = _hf_greedy(lm, prompt, n)
        assert d.n_tokens == n and d.stop == "length"
        assert d.text == lm.tokenizer.decode(ref, skip_special_tokens=True)


def test_stop_strings_cut_the_text_and_end_the_row(no_eos):
    lm = no_eos
    full = decode_rows(lm, _rows(lm, [0, 0, 12])[2:])[0]
    # a character that first appears after the start of the continuation
    at = next(i for i in range(1, len(full.text)) if full.text[i] not in full.text[:i])
    stop = full.text[at]
    cut = decode_rows(lm, _rows(lm, [0, 0, 12])[2:], stop_strings=[stop])[0]
    assert cut.stop == "stop_string"
    assert cut.text == full.text[:at]
    assert cut.n_tokens < 12


def test_eos_ends_a_row(tiny):
    """With the greedy first token declared end-of-sequence, the row ends at once, empty."""
    Engine.of(tiny)
    ids = tiny.tokenizer(PROMPTS[0], add_special_tokens=False).input_ids
    with torch.no_grad():
        first = int(tiny.model(torch.tensor([ids])).logits[0, -1].argmax())
    config = tiny.model.generation_config
    saved = config.eos_token_id
    try:
        config.eos_token_id = first
        ended = decode_rows(tiny, _rows(tiny, [10]))[0]
    finally:
        config.eos_token_id = saved
    assert ended.stop == "eos" and ended.n_tokens == 0 and ended.text == ""


def test_sampling_is_seeded_per_row_whatever_the_batch(no_eos):
    lm = no_eos
    kw = {"temperature": 1.0, "top_p": 0.9}
    together = decode_rows(lm, _rows(lm, [8, 8, 8], seeds=[1, 2, 3]), **kw)
    alone = decode_rows(lm, _rows(lm, [8], seeds=[1]), **kw)
    assert together[0].text == alone[0].text
    other_seed = decode_rows(lm, _rows(lm, [8], seeds=[99]), **kw)
    greedy = decode_rows(lm, _rows(lm, [8]))
    assert {other_seed[0].text, greedy[0].text} != {together[0].text}
