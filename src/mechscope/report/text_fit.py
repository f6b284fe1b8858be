"""Where report text is cut or wrapped: one rule, used by every renderer.

Text in a report comes from results: tokens, sample ids, prompts, a model's continuations.
It can be anything (a 40-character token, CJK, emoji), and a label that runs past its
figure, or a short table cell that grows to several lines, breaks the page. So a label (tick,
legend entry, graph node, short table cell) longer than its limit is cut with an ellipsis
and the renderer puts the whole text where the reader can hover it (a ``title`` in HTML,
the hover label in plotly; a paper figure shows the cut text alone); prose (titles, captions,
continuations) is wrapped instead.

Widths are counted in columns, not characters: an East Asian wide or full-width character
(CJK, most emoji) takes two, a combining mark or joiner none, so 40 CJK characters are not
taken for a short label. A cut never separates a character from its combining marks or
splits an emoji sequence. Numbers are never cut: a cut number is a wrong number.
"""

from __future__ import annotations

import numbers
import re
import unicodedata

ELLIPSIS = "…"
LABEL_WIDTH = 40  #: tick labels, legend entries, panel titles, graph node labels
CELL_WIDTH = 32  #: a table cell of short text (ids, names, tokens): always one line
HOVER_WIDTH = 72  #: a line of a hover label (longer lines are wrapped)

_JOINER = "\u200d"  # zero-width joiner: binds the emoji on either side into one
_WORD = re.compile(r"[^\s_]+")  # a run with no break opportunity (headers break after "_")


def char_width(ch: str) -> int:
    """Columns ``ch`` takes: 2 for East Asian wide or full-width, 0 for marks and joiners."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    if 0xFE00 <= ord(ch) <= 0xFE0F or 0x1F3FB <= ord(ch) <= 0x1F3FF:  # selectors, skin tones
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _widths(text: str) -> list[int]:
    """Each character's columns; one joined to the one before (emoji ZWJ sequences) takes 0."""
    return [0 if i and text[i - 1] == _JOINER else char_width(ch) for i, ch in enumerate(text)]


def width(text: str) -> int:
    """Columns ``text`` takes (see :func:`char_width`)."""
    return sum(_widths(text))


def is_number(value: object) -> bool:
    """A number, or a string that reads as one (``"-0.42"``, ``"1e-05"``, ``"nan"``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Number):
        return True
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        float(value.replace(",", ""))
    except ValueError:
        return False
    return True


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF  # a flag is a pair of these


def _boundary(text: str, i: int) -> bool:
    """Whether ``text`` may be cut before index ``i`` without splitting a character cluster."""
    if i <= 0 or i >= len(text):
        return True
    if char_width(text[i]) == 0 or text[i - 1] == _JOINER:
        return False
    if _regional(text[i]) and _regional(text[i - 1]):
        first = i
        while first > 0 and _regional(text[first - 1]):
            first -= 1
        return (i - first) % 2 == 0
    return True


def cut(value: object, limit: int = LABEL_WIDTH) -> str:
    """``value`` as text, cut to at most ``limit`` columns with an ellipsis when it is wider;
    a number whole whatever its width (the caller keeps the whole text for hover)."""
    text = str(value)
    if is_number(value) or width(text) <= limit:
        return text
    room, end, used = max(limit - 1, 1), 0, 0
    for i, w in enumerate(_widths(text)):
        if used + w > room:
            break
        used += w
        end = i + 1
    while end > 0 and not _boundary(text, end):
        end -= 1
    return text[:end].rstrip() + ELLIPSIS


def cut_words(text: str, limit: int = CELL_WIDTH) -> str:
    """``text`` with every run that cannot break (no space, no underscore) wider than
    ``limit`` cut: a header or title that wraps, whose overlong token must not widen it."""
    return _WORD.sub(lambda m: cut(m[0], limit), str(text))


def _pieces(word: str, limit: int) -> list[str]:
    """``word`` split into pieces of at most ``limit`` columns at cluster boundaries."""
    out, start, used = [], 0, 0
    for i, w in enumerate(_widths(word)):
        if used + w > limit and i > start and _boundary(word, i):
            out.append(word[start:i])
            start, used = i, 0
        used += w
    return [*out, word[start:]]


def wrap(text: str, limit: int) -> list[str]:
    """``text`` in lines of at most ``limit`` columns, broken at spaces; a word wider than a
    line is broken inside (CJK has no spaces to break at). Prose is wrapped, never cut."""
    lines: list[str] = []
    line, used = "", 0
    for word in str(text).split():
        for piece in _pieces(word, limit):
            w = width(piece)
            if line and used + 1 + w > limit:
                lines.append(line)
                line, used = "", 0
            line, used = (f"{line} {piece}", used + 1 + w) if line else (piece, w)
    return [*lines, line] if line else lines
