"""Arithmetic pairs and the GSM8K / MATH-500 loaders."""

from __future__ import annotations

import operator
import re

import pytest

from mechscope.data.math import generate_arithmetic, load_gsm8k, load_math500
from mechscope.data.pairs import tokenize_pair
from mechscope.errors import InputError

_EXPR = re.compile(r"(\d+) ([+-]) (\d+) =")
_OPS = {"+": operator.add, "-": operator.sub}


def _value(prompt: str) -> int:
    a, op, b = _EXPR.search(prompt).groups()
    return _OPS[op](int(a), int(b))


def test_answers_are_right_and_one_operand_changes():
    pairs = generate_arithmetic(200, seed=0)
    for p in pairs:
        assert int(p.correct) == _value(p.clean) >= 0
        assert int(p.wrong) == _value(p.corrupt) != int(p.correct)
        assert p.correct.startswith(" ")
        assert sum(p.modified[k] for k in ("a", "b")) == 1 and not p.modified["end"]
    assert {p.metadata["op"] for p in pairs} == {"+", "-"}
    assert [p.to_dict() for p in pairs] == [p.to_dict() for p in generate_arithmetic(200, seed=0)]


def test_tokenizer_filter_keeps_single_token_answers(bpe_tok):
    for p in generate_arithmetic(50, seed=1, tokenizer=bpe_tok, operand_range=(0, 29)):
        tp = tokenize_pair(p, bpe_tok, policy="error")
        assert bpe_tok.decode([tp.correct_id]) == p.correct


def test_space_in_prompt_for_digit_tokenizers(stories_tok):
    # stories260K has no "▁7" token: with the space in the prompt, digits are single tokens
    pairs = generate_arithmetic(
        20,
        seed=2,
        tokenizer=stories_tok,
        answer_space=False,
        operand_range=(0, 9),
        word_problems=True,
    )
    for p in pairs:
        assert p.clean.endswith("he has ") and not p.correct.startswith(" ")
        tp = tokenize_pair(p, stories_tok, policy="error")
        assert stories_tok.convert_ids_to_tokens(tp.correct_id) == p.correct
    with pytest.raises(InputError, match="single-token"):
        generate_arithmetic(3, tokenizer=stories_tok, operand_range=(10, 30), max_attempts=200)


def test_gsm8k_and_math500(datasets_dir):
    gsm = load_gsm8k(datasets_dir / "gsm8k_test.jsonl")
    assert len(gsm) == 1319
    for g in gsm:
        last = g.solution.strip().splitlines()[-1]
        assert last.startswith("####") and last[4:].strip().replace(",", "") == g.answer
    assert gsm[0].answer == "18"
    m = load_math500(datasets_dir / "math500_test.jsonl")
    assert len(m) == 500 and len({x.id for x in m}) == 500
    assert all("\\boxed" in x.solution for x in m[:50])
    assert {"subject", "level"} <= set(m[0].metadata)


def test_gsm8k_without_final_answer_names_line_and_field(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"question": "q", "answer": "x\\n#### 3"}\n{"question": "q", "answer": "4"}\n')
    with pytest.raises(InputError) as err:
        load_gsm8k(path)
    assert err.value.field == "answer" and "line 2" in err.value.sample
