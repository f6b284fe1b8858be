"""Which continuation tokens to look at: the semantic filter, code token classes, anchors.

In code, a large share of tokens are indentation and newlines; their predictions say little
about what the model plans, so curves average over *semantic* tokens (text that is not
whitespace only). Code tokens are further classed as keyword, identifier, literal, operator
or other, from Python's own tokenizer where the text parses and from the token's text
otherwise. Anchors (first ``return``, first control-flow keyword, a user regex) align
samples of different lengths on a structural point.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from collections.abc import Sequence

import numpy as np

from mechscope.errors import InputError

Span = tuple[int, int]
TOKEN_CLASSES = ("keyword", "identifier", "literal", "operator", "other")
ANCHORS = {
    "return": r"\breturn\b",
    "control": r"\b(?:if|for|while|try|with|match)\b",
}
_LITERAL_WORDS = {"True", "False", "None"}
_NUMBER = re.compile(r"^[0-9][0-9_]*(\.[0-9_]*)?([eE][+-]?[0-9]+)?[jJ]?$|^\.[0-9]+$")
_IDENT = re.compile(r"^[^\W\d]\w*$")
_OPERATOR_CHARS = set("+-*/%@&|^~<>=!.,:;()[]{}")
#: Python token types that get a class; None: class from the token's text (names, stray
#: characters such as an unterminated quote).
_CLASSED = {
    tokenize.NAME: None,
    tokenize.NUMBER: "literal",
    tokenize.STRING: "literal",
    tokenize.OP: "operator",
    tokenize.ERRORTOKEN: None,
}


def semantic_mask(texts: Sequence[str]) -> np.ndarray:
    """True for tokens whose text is not whitespace only (the "semantic index")."""
    return np.array([bool(t.strip()) for t in texts], dtype=bool)  # [tokens]


def _class_of_text(text: str) -> str:
    t = text.strip()
    if not t:
        return "other"
    if t in _LITERAL_WORDS or _NUMBER.match(t) or t[0] in "'\"" or t[-1] in "'\"":
        return "literal"
    if keyword.iskeyword(t) or keyword.issoftkeyword(t):
        return "keyword"
    if _IDENT.match(t):
        return "identifier"
    if all(c in _OPERATOR_CHARS for c in t):
        return "operator"
    return "other"


def _python_token_spans(text: str) -> list[tuple[int, int, str]] | None:
    """``(start, end, class)`` of Python tokens in ``text``; None if it does not tokenise."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type not in _CLASSED or not tok.string.strip():
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            start, end = line_starts[r0 - 1] + c0, line_starts[r1 - 1] + c1
            cls = _CLASSED[tok.type] or _class_of_text(tok.string)
            out.append((start, end, cls))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return out


def code_token_classes(text: str, offsets: Sequence[Span]) -> list[str]:
    """Class of each LM token of ``text`` (character ``offsets``): the class of the Python
    token it overlaps most; tokens of unparsable text are classed from their own text."""
    spans = _python_token_spans(text)
    classes = []
    for a, b in offsets:
        piece = text[a:b]
        if not piece.strip():
            classes.append("other")
            continue
        if spans is None:
            classes.append(_class_of_text(piece))
            continue
        best, cls = 0, "other"
        for s, e, c in spans:
            if s >= b:
                break
            overlap = min(b, e) - max(a, s)
            if overlap > best:
                best, cls = overlap, c
        classes.append(cls)
    return classes


def anchor_pattern(anchor: str) -> re.Pattern[str]:
    """``"return"``, ``"control"`` or ``"re:<regex>"`` as a compiled pattern."""
    if anchor in ANCHORS:
        return re.compile(ANCHORS[anchor])
    if anchor.startswith("re:"):
        try:
            return re.compile(anchor[3:])
        except re.error as exc:
            raise InputError(f"expected a valid regex ({exc})", field="anchor") from None
    raise InputError(
        f"expected 'return', 'control' or 're:<regex>', got {anchor!r}", field="anchor"
    )


def anchor_token(
    text: str, offsets: Sequence[Span], keep: np.ndarray, pattern: re.Pattern[str]
) -> int | None:
    """Index among the kept tokens (``keep`` mask) of the first token overlapping the first
    match of ``pattern`` in ``text``; None when nothing matches."""
    match = pattern.search(text)
    if match is None:
        return None
    s, e = match.span()
    e = max(e, s + 1)
    rank = np.cumsum(keep) - 1  # index among kept tokens
    for i, (a, b) in enumerate(offsets):
        if keep[i] and a < e and b > s:
            return int(rank[i])
    return None
