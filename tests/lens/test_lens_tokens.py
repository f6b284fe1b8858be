"""Semantic filter, code token classes and anchors on hand-labelled snippets."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.errors import InputError
from mechscope.lens.tokens import (
    anchor_pattern,
    anchor_token,
    code_token_classes,
    semantic_mask,
)

CODE = "    if x > 1:\n        return 'ab' + str(x)\n"


def _split(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    assert "".join(pieces) == text
    out, at = [], 0
    for p in pieces:
        out.append((at, at + len(p)))
        at += len(p)
    return out


PIECES = [
    "    ",
    "if",
    " x",
    " >",
    " 1",
    ":",
    "\n       ",
    " return",
    " '",
    "ab",
    "'",
    " +",
    " str",
    "(",
    "x",
    ")",
    "\n",
]
CLASSES = [
    "other",
    "keyword",
    "identifier",
    "operator",
    "literal",
    "operator",
    "other",
    "keyword",
    "literal",
    "literal",
    "literal",
    "operator",
    "identifier",
    "operator",
    "identifier",
    "operator",
    "other",
]


def test_semantic_mask_drops_whitespace_only_tokens():
    mask = semantic_mask(PIECES)
    assert mask.tolist() == [bool(p.strip()) for p in PIECES]
    assert not mask[0] and not mask[6] and mask[1]


def test_code_classes_from_python_tokens():
    assert code_token_classes(CODE, _split(CODE, PIECES)) == CLASSES


def test_code_classes_of_broken_code():
    text = "x = 'unterminated\n"  # a stray quote: classed from its text
    pieces = ["x", " =", " '", "unterminated", "\n"]
    got = code_token_classes(text, _split(text, pieces))
    assert got == ["identifier", "operator", "literal", "identifier", "other"]
    text = "f(x, 2"  # does not tokenise at all: every token classed from its own text
    assert code_token_classes(text, _split(text, ["f", "(", "x", ",", " 2"])) == [
        "identifier",
        "operator",
        "identifier",
        "operator",
        "literal",
    ]


def test_anchor_counts_only_kept_tokens():
    offsets = _split(CODE, PIECES)
    keep = semantic_mask(PIECES)
    at = anchor_token(CODE, offsets, keep, anchor_pattern("return"))
    assert at == int(np.cumsum(keep)[7] - 1)  # " return" among semantic tokens
    assert anchor_token(CODE, offsets, keep, anchor_pattern("control")) == 0
    assert anchor_token(CODE, offsets, keep, anchor_pattern(r"re:str\(")) == int(
        np.cumsum(keep)[12] - 1
    )
    assert anchor_token(CODE, offsets, keep, anchor_pattern("re:while")) is None


def test_bad_anchor_is_an_input_error():
    with pytest.raises(InputError, match="anchor"):
        anchor_pattern("first-loop")
    with pytest.raises(InputError, match="regex"):
        anchor_pattern("re:(")
