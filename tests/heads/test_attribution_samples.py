"""The mixed prompt set and the HumanEval prompt shortener."""

from __future__ import annotations

import pytest

from mechscope.data.tokens import answer_token_ids, encode
from mechscope.errors import InputError
from mechscope.heads.samples import mixed_prompt_set, short_humaneval_prompt


def test_short_humaneval_prompt() -> None:
    prompt = (
        "from typing import List\n\n\ndef f(xs: List[int],\n      k: int) -> int:\n"
        '    """ Return the k-th item.\n    >>> f([1, 2], 0)\n    1\n    """\n'
    )
    short = short_humaneval_prompt(prompt, "f")
    assert (
        short
        == 'def f(xs: List[int],\n      k: int) -> int:\n    """ Return the k-th item.\n    """'
    )
    one_line = 'def g():\n    """Do it."""\n'
    assert short_humaneval_prompt(one_line, "g") == 'def g():\n    """Do it."""'


def test_mixed_set_fits_and_notes_missing_tasks(tiny_llama, monkeypatch, tmp_path) -> None:
    tok = tiny_llama.tokenizer
    samples, notes = mixed_prompt_set(tok, n_per_task=2, tasks=("ioi", "humaneval"), max_tokens=64)
    assert {s.task for s in samples} == {"ioi", "humaneval"}
    for s in samples:
        n = len(encode(tok, s.prompt).ids) + len(answer_token_ids(tok, s.prompt, s.completion))
        assert n <= 64
    assert all(s.correct and s.wrong for s in samples if s.task == "ioi")
    monkeypatch.setenv("MECHSCOPE_DATASETS", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import mechscope.data.datasets as mod

    monkeypatch.setattr(mod, "dataset_roots", lambda: [tmp_path])
    _, notes = mixed_prompt_set(tok, n_per_task=1, tasks=("facts",))
    assert notes and "facts" in notes[0]
    with pytest.raises(InputError, match="tasks"):
        mixed_prompt_set(tok, tasks=("poems",))


def test_mixed_set_reads_shared_datasets(tiny_llama, shared_dir) -> None:
    samples, notes = mixed_prompt_set(tiny_llama.tokenizer, n_per_task=1, max_tokens=96)
    assert {s.task for s in samples} == {"ioi", "facts", "gsm8k", "humaneval"}, notes
