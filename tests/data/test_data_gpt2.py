"""The same checks under GPT-2's real vocabulary (skipped unless openai-whisper is installed)."""

from __future__ import annotations

from mechscope.data.ioi import generate_ioi
from mechscope.data.math import generate_arithmetic
from mechscope.data.pairs import tokenize_pair
from mechscope.data.winogrande import load_winogrande_mech


def test_ioi_under_gpt2(gpt2_tok):
    from mechscope.data.ioi_pools import NAMES
    from mechscope.data.tokens import filter_single_token_names

    kept, _ = filter_single_token_names(NAMES, gpt2_tok)
    assert len(kept) >= 30  # common English names are single GPT-2 tokens
    for p in generate_ioi(40, seed=0, tokenizer=gpt2_tok):
        tp = tokenize_pair(p, gpt2_tok, policy="error")
        assert tp.clean_ids[0] != gpt2_tok.eos_token_id  # GPT-2 adds no BOS
        for name, key in (("IO", "IO"), ("S1", "S"), ("S2", "S")):
            tok = gpt2_tok.decode([tp.clean_ids[tp.positions[name][0]]])
            assert tok == " " + p.metadata[key]
        assert gpt2_tok.decode([tp.correct_id]) == p.correct


def test_math_and_winogrande_under_gpt2(gpt2_tok):
    for p in generate_arithmetic(30, seed=0, tokenizer=gpt2_tok):
        assert gpt2_tok.decode([tokenize_pair(p, gpt2_tok, policy="error").correct_id]) == (
            p.correct
        )
    for p in load_winogrande_mech()[:10]:
        tp = tokenize_pair(p, gpt2_tok)
        assert tp.correct_id != tp.wrong_id
